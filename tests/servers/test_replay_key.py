"""The replay talks to servers launched with the user's own flags: with an --api-key (or an
--api-key-file) among them, each of its requests (the plain run, the calibration, a draft's
teacher-forced pass) carries that key, as the tune's arms do, so a keyed server is replayed
instead of answering 401, and the key is in nothing the replay says (issue 41). The real
pinned llama-server."""

from __future__ import annotations

import json

import pytest
from specdeck.core.bench.suites import builtin_suites
from specdeck.core.tune import setup as tune_setup
from specdeck.core.tune.candidates import Candidate
from specdeck.core.tune.replay.phase import forecast

pytestmark = pytest.mark.slow
KEY = "sk-REPLAYKEY0001"


@pytest.mark.parametrize("by_file", [False, True])
def test_a_keyed_server_is_replayed_with_its_key_and_the_key_never_shown(
        llama_bin, demo_gguf, tmp_path, by_file):
    if by_file:
        key_file = tmp_path / "keys.txt"
        key_file.write_text(f"{KEY}\nsk-OTHER\n", encoding="utf-8")
        secret = ("--api-key-file", str(key_file))
    else:
        secret = ("--api-key", KEY)
    setup = tune_setup.demo(llama_bin, ("-t", "1", "-c", "1024", *secret))
    prompt = builtin_suites()["grounded"].prompts[:1]
    said: list[str] = []
    result = forecast(setup, [Candidate("ngram-mod"), Candidate("draft-simple", demo_gguf)],
                      prompt, 8, emit=lambda e: said.append(repr(e)), log_dir=tmp_path)
    # the calibration server answered (its fit may still want more tokens than 8)
    assert result.requests > 0 and result.calibration_exact is not None
    assert {s.candidate for s in result.settings} >= {"ngram-mod"}
    assert not any("draft" in label for label, _ in result.not_replayed)
    assert any(s.setting.kinds[0] == "draft-simple" for s in result.settings)
    assert KEY not in json.dumps(result.to_json()) and KEY not in " ".join(said)
