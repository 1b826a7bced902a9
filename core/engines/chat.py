"""A model's chat template, applied the way transformers applies it, with the template
treated as what it is: code from a downloaded file.

transformers renders it in Jinja's sandbox, which blocks attribute tricks and huge ranges
but has no time limit: nested loops can run for hours. Rendering happens on a thread that
is given up on after ``TEMPLATE_TIMEOUT_S`` and then stopped: a trace function on that
thread alone raises at its next line once the deadline has passed, so an abandoned template
does not go on burning a core under the measurements that follow. Sandbox refusals and any
other failure of the template become one clear error instead of Jinja's own traceback.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from specdeck.core.errors import InvalidInputError

TEMPLATE_TIMEOUT_S = 10.0
"""Real templates render in milliseconds."""


class TemplateAbandoned(Exception):
    """Raised inside a template thread that ran past its deadline, to end it."""


def render_chat(tokenizer: Any, text: str, *, tokenize: bool, model_name: str,
                timeout_s: float = TEMPLATE_TIMEOUT_S) -> Any:
    """``tokenizer.apply_chat_template`` for one user message with the generation prompt."""
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidInputError(f"{model_name} has no chat template.",
                                "Run without the chat template (a plain completion prompt).")
    outcome: dict[str, Any] = {}
    stop = threading.Event()

    def trace(frame, event, arg):
        if stop.is_set():
            raise TemplateAbandoned()
        return trace

    def render() -> None:
        sys.settrace(trace)  # this thread only
        try:
            outcome["value"] = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True,
                tokenize=tokenize)
        except BaseException as exc:  # noqa: BLE001 - the template is user data: report it
            outcome["error"] = exc
        finally:
            sys.settrace(None)

    worker = threading.Thread(target=render, name="chat-template", daemon=True)
    worker.start()
    worker.join(timeout_s)
    fix = ("Run without the chat template (--no-chat), or fix chat_template in the model's "
           "tokenizer_config.json.")
    if worker.is_alive():
        stop.set()  # the thread ends at its next traced line
        raise InvalidInputError(
            f"{model_name}'s chat template did not finish within {timeout_s:g} s (real "
            "templates take milliseconds): it loops too long.", fix)
    error = outcome.get("error")
    if error is not None:
        detail = (str(error).strip().splitlines() or [""])[0][:200]
        raise InvalidInputError(
            f"{model_name}'s chat template failed ({type(error).__name__}: {detail}).", fix)
    return outcome["value"]
