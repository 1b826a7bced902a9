"""Chat templates are code from a downloaded file: a template the sandbox refuses, one that
raises, and one that loops for hours each give one clear error, through the real
transformers tokenizer (a real tokenizer.json from the fixtures)."""

from __future__ import annotations

import pytest
from conftest import MODELS

from specdeck.core.engines.chat import render_chat
from specdeck.core.errors import InvalidInputError

transformers = pytest.importorskip("transformers")  # the torch extra; CI installs it


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(MODELS / "TinyLlama-1.1B-Chat-v1.0" / "tokenizer.json"))


def test_a_good_template_renders(tokenizer):
    tokenizer.chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    assert render_chat(tokenizer, "hi", tokenize=False, model_name="m") == "<|user|>hi"


@pytest.mark.parametrize(("template", "says"), [
    ("{{ ''.__class__.__mro__ }}", "SecurityError"),
    ("{% for i in range(10**9) %}{% endfor %}", "OverflowError"),
    ("{{ raise_exception('no system role') }}", "no system role"),
])
def test_sandbox_refusals_are_one_clear_error(tokenizer, template, says):
    tokenizer.chat_template = template
    with pytest.raises(InvalidInputError) as caught:
        render_chat(tokenizer, "hi", tokenize=False, model_name="Evil-1B")
    assert caught.value.what.startswith("Evil-1B's chat template failed (")
    assert says in caught.value.what and "--no-chat" in caught.value.fix


def test_a_template_that_loops_too_long_is_given_up_on_and_stopped(tokenizer):
    """range(99999) twice would loop for hours: the call gives up at its deadline (the error
    names it; the template never finishes on its own, so an answer at all is the deadline's),
    and the thread that rendered it stops too instead of burning a core under later
    measurements."""
    import threading

    tokenizer.chat_template = ("{% for i in range(99999) %}{% for j in range(99999) %}"
                               "{% endfor %}{% endfor %}")
    with pytest.raises(InvalidInputError, match="did not finish within 0.5 s"):
        render_chat(tokenizer, "hi", tokenize=False, model_name="Slow-1B", timeout_s=0.5)

    def rendering():
        return [t for t in threading.enumerate() if t.name == "chat-template" and t.is_alive()]

    for thread in rendering():
        thread.join(60)  # ends at its next traced line; without the stop, in hours
    assert not rendering()


def test_no_template_says_so(tokenizer):
    tokenizer.chat_template = None
    with pytest.raises(InvalidInputError, match="has no chat template"):
        render_chat(tokenizer, "hi", tokenize=True, model_name="Base-1B")
