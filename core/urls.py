"""URLs as they may be shown: no password, no secret-looking query value. Used by every
message, log line and file that names a server or a Hub endpoint."""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SECRET_QUERY_KEYS = {"token", "key", "api_key", "apikey", "access_token", "auth", "password",
                     "secret", "sig", "signature"}


def redact_url(url: str) -> str:
    """``url`` without its password and secret-looking query values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k.lower() in SECRET_QUERY_KEYS else v) for k, v in pairs],
                          safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


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
