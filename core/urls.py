"""URLs as they may be shown: no password, no secret-looking query value. Used by every
message, log line and file that names a server or a Hub endpoint. And ``mask_secrets``: the
secrets SpecDeck sent, taken out of whatever a server says back (an error body that echoes
the key or the Authorization header)."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

_SECRET_NAME = re.compile(r"key|token|secret|passw|pwd|auth|sig|credential|session|cookie",
                          re.IGNORECASE)
"""Query names whose value is a secret: api-key, x-api-key, apiKey, access_token, hf_token,
client_secret, password, auth, sig, signature... matched as parts of the name, so a spelling
SpecDeck has not seen is still hidden (hiding a harmless value costs nothing)."""
MASK = "***"


def is_secret_name(name: str) -> bool:
    """Whether a query parameter (or header) called ``name`` carries a secret."""
    return bool(_SECRET_NAME.search(name))


def redact_url(url: str) -> str:
    """``url`` without its password and secret-looking query values (a URL without a scheme,
    ``user:pass@host:8080``, too)."""
    bare = "://" not in url
    try:
        parts = urlsplit("//" + url if bare else url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{MASK}@{host}" if ":" in userinfo else f"{user}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, MASK if is_secret_name(k) else v) for k, v in pairs], safe="*")
    shown = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return shown[2:] if bare and shown.startswith("//") else shown


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets a URL carries: its password (as written and decoded) and the values of
    secret-looking query names."""
    try:
        parts = urlsplit(url if "://" in url else "//" + url)
    except ValueError:
        return ()
    found = []
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if is_secret_name(name) and value:
            found.append(value)
    return tuple(found)


MIN_MASKED = 4
"""Shorter strings are not masked: "ab" would be starred out of every word that holds it,
and a secret that short protects nothing."""


def secret_forms(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """Every form in which a server could echo ``secrets``: as is, percent-encoded, and in a
    Basic Authorization header (base64 of "user:password" is covered by the caller passing
    the header's value). Longest first, so a longer secret is masked before a part of it."""
    forms: set[str] = set()
    for secret in secrets:
        if not secret or len(secret) < MIN_MASKED:
            continue
        forms.add(secret)
        forms.add(quote(secret, safe=""))
        if secret.startswith("Basic "):
            forms.add(secret[len("Basic "):])
            try:
                forms.add(base64.b64decode(secret[len("Basic "):]).decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                pass
    return tuple(sorted((f for f in forms if len(f) >= MIN_MASKED), key=len, reverse=True))


def mask_secrets(text: str, forms: Iterable[str]) -> str:
    """``text`` with every one of ``forms`` (from :func:`secret_forms`) replaced by ***."""
    for form in forms:
        if form in text:
            text = text.replace(form, MASK)
    return text


_URL = re.compile(r"https?://[^\s'\"<>]*[^\s'\"<>.,:;)\]]")


def redact_text(text: str) -> str:
    """Every URL in ``text`` redacted."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def redact_log_records() -> None:
    """From now on every log record, from any logger and whatever its handlers, has its URLs
    redacted: HTTP clients (huggingface_hub, httpx) log whole request URLs, credentials
    included, through handlers of their own."""
    make = logging.getLogRecordFactory()
    if getattr(make, "specdeck_redacts", False):
        return

    def factory(*args, **kwargs):
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logger's to report
            return record
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return record

    factory.specdeck_redacts = True
    logging.setLogRecordFactory(factory)


_ENV_WORD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
"""``NAME=value``: an environment assignment in a command line (``env HF_TOKEN=... cmd``,
``docker run -e HF_TOKEN=...``), or a flag's ``--name=value`` once its dashes are off."""


def secret_flag(name: str) -> bool:
    """Whether a command line's flag takes a secret as its value: llama-server's own
    (``core.llama_flags.SECRET``: --api-key, --hf-token, -hft, ...) and any long flag whose
    name says key, token, secret, password or auth (a spelling SpecDeck has not seen is still
    hidden: hiding a harmless value costs nothing)."""
    from specdeck.core.llama_flags import SECRET

    return name in SECRET or (name.startswith("--") and is_secret_name(name))


def shown_args(args: Iterable[str]) -> tuple[str, ...]:
    """A command line as it may be shown or saved: the value of every secret flag
    (``--api-key K``, ``--api-key=K``, ``-hft T``) and of every secret-looking environment
    assignment (``HF_TOKEN=T``, ``-e OPENAI_API_KEY=K``) replaced by ***, URLs redacted. The
    one masker of command lines: progress lines, reports, run files and errors all show
    argv through it."""
    out: list[str] = []
    hide = False
    for arg in map(str, args):
        if hide:
            out.append(MASK)
            hide = False
            continue
        name, eq, _value = arg.partition("=")
        if arg.startswith("-"):
            if secret_flag(name):
                if eq:
                    out.append(f"{name}={MASK}")
                else:
                    out.append(arg)
                    hide = True
                continue
        else:
            env = _ENV_WORD.match(arg)
            if env and is_secret_name(env.group(1)):
                out.append(f"{env.group(1)}={MASK}")
                continue
        out.append(redact_text(arg))
    return tuple(out)


_KEY_LINE = re.compile(
    r"^(\s*(?:-\s+)?)([\"']?)([A-Za-z0-9_.][A-Za-z0-9_.-]*)\2(\s*[:=])([ \t]*)(.*?)(\s*)$")
"""A config file's ``key: value`` (YAML) or ``key = value`` (a presets .ini) line."""
_WORD = re.compile(r"\S+")
_BLOCK_SCALAR = re.compile(r"^[|>][-+0-9]*\s*(?:#.*)?$")
"""A YAML block scalar's marker (``|``, ``>-``, ``|+2``): the value is on the lines below."""
_FLOW_PAIR = re.compile(
    r"""((?<=[{,])\s*(["']?)([A-Za-z0-9_.-]+)\2\s*:\s+)"""
    r"""(\[[^\]]*\]|"[^"]*"|'[^']*'|[^,}\]\s][^,}\]]*?)(?=\s*[,}\]])""")
"""A ``key: value`` pair inside a YAML flow map (``{HF_TOKEN: T, OTHER: 1}``)."""
_QUOTES = "\"'"
_NOT_SECRET = re.compile(r"^(?:[-+]?[0-9][0-9._]*|true|false|yes|no|on|off|null|~|[|>][-+0-9]*)$",
                         re.IGNORECASE)
"""Values no secret is: a number (``draft_num_tokens: 4``), a boolean (``disable_auth:
false``), nothing, a YAML block marker. Shown as they are, so a diff of such a key stays
readable."""


def shown_text(text: str) -> str:
    """The text of a config file (llama-swap's config.yaml, a presets .ini, TabbyAPI's
    config.yml) as it may be shown or saved: in every command line it holds, whatever the
    model, macro or line, the value of each secret flag and environment assignment masked as
    :func:`shown_args` does (a flag at the end of one line hides the first word of the next,
    as a folded cmd reads), and the value of every key whose name says secret (``api_key:
    K``, ``hf-token = T``, the items of an ``apiKeys:`` list). The one masker of config
    files: every diff and printout of one goes through it (core.config.edit.ConfigChange)."""
    out: list[str] = []
    hide = False
    list_indent: int | None = None  # the items of a secret key's list are hidden
    block_indent: int | None = None  # and every line of a secret key's block scalar
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        end = line[len(body):]
        indent = len(body) - len(body.lstrip())
        if block_indent is not None and (not body.strip() or indent > block_indent):
            out.append((body[:indent] + MASK if body.strip() else body) + end)
            continue
        block_indent = None
        if list_indent is not None and body.strip() and (
                indent > list_indent or (indent == list_indent and body.lstrip()[:1] == "-")):
            out.append(_masked_item(body) + end)
            continue
        list_indent = None
        key = _KEY_LINE.match(body)
        if key and not body.lstrip().startswith(("#", ";")) and is_secret_name(key.group(3)):
            value = key.group(6)
            if not value or value.startswith("#"):
                list_indent = indent
                out.append(line)
            elif _BLOCK_SCALAR.match(value):
                block_indent = indent
                out.append(line)
            elif _NOT_SECRET.match(value.strip(_QUOTES)):
                out.append(line)
            elif value.lstrip(_QUOTES).startswith("-"):  # a macro of flags: masked as argv
                masked, hide = _masked_words(body, False)
                out.append(masked + end)
                continue
            else:
                q = value[0] if value[0] in _QUOTES else ""
                out.append(body[:key.start(6)] + f"{q}{MASK}{q}" + key.group(7) + end)
            hide = False
            continue
        masked, hide = _masked_words(_masked_flow(body), hide)
        out.append(masked + end)
    return "".join(out)


def _masked_flow(body: str) -> str:
    """A line's YAML flow maps (``env: {HF_TOKEN: T, OTHER: 1}``) with the value of each
    secret-named key masked, a flow list or quoted value whole."""
    def mask(match: re.Match[str]) -> str:
        if not is_secret_name(match.group(3)):
            return match.group(0)
        value = match.group(4)
        q = value[0] if value[:1] in ("[", *_QUOTES) else ""
        close = {"[": "]"}.get(q, q)
        return match.group(1) + f"{q}{MASK}{close}"
    return _FLOW_PAIR.sub(mask, body)


def _masked_item(body: str) -> str:
    """An item of a secret key's list (``- "sk-..."``) with its value masked."""
    stripped = body.lstrip()
    lead = body[:len(body) - len(stripped)]
    if stripped.startswith("-"):
        rest = stripped[1:].lstrip()
        lead += stripped[:len(stripped) - len(rest)]
        stripped = rest
    q = stripped[0] if stripped and stripped[0] in _QUOTES else ""
    return lead + f"{q}{MASK}{q}" if stripped else body


def _masked_words(body: str, hide: bool) -> tuple[str, bool]:
    """One line's words masked as shown_args masks an argv (quotes, commas and brackets
    around a word kept); ``hide``: the first word is a secret flag's value, carried over from
    the line before, as is the result."""
    pieces: list[str] = []
    last = 0
    for match in _WORD.finditer(body):
        word = match.group(0)
        core = word.lstrip(_QUOTES + "[(")
        before = word[:len(word) - len(core)]
        inner = core.rstrip(_QUOTES + ",])")
        after = core[len(inner):]
        pieces.append(body[last:match.start()])
        last = match.end()
        if hide and inner:
            pieces.append(before + MASK + after)
            hide = False
            continue
        shown = shown_args([inner]) if inner else ("",)
        if inner.startswith("-") and shown[0] == inner and secret_flag(inner.partition("=")[0]):
            hide = "=" not in inner
        pieces.append(before + shown[0] + after)
    pieces.append(body[last:])
    return "".join(pieces), hide


def args_secrets(args: Iterable[str]) -> tuple[str, ...]:
    """The secrets a command line carries (what :func:`shown_args` hides), in every form a
    program could echo them (:func:`secret_forms`): to take out of text that quotes them, a
    server's log line or error, say."""
    args = list(map(str, args))
    shown = shown_args(args)
    found = []
    for given, masked in zip(args, shown):
        if masked == MASK:
            found.append(given)
        elif masked.endswith(f"={MASK}") and "://" not in given:
            found.append(given.partition("=")[2])
        found += url_secrets(given)
    # llama.cpp echoes an argument it refuses with its underscores made dashes
    # ("invalid argument: --hf-token=hf-abc" for --hf-token=hf_abc: common/arg.cpp)
    return secret_forms([*found, *(f.replace("_", "-") for f in found)])
