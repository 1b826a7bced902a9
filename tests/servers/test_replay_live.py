"""Replay against the real llama-server: one plain run of two grounded prompts, then each
n-gram spec type on its own server with the same requests; the replayed counts must equal
the server's own /metrics counters, position by position (core.tune.replay). And a draft
model predicted from its teacher-forced pass on a plain server of the draft GGUF."""

from __future__ import annotations

import subprocess

import pytest
from specdeck.core.bench.suites import builtin_suites
from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer
from specdeck.core.servers.transport import Base
from specdeck.core.tune.replay.capture import capture
from specdeck.core.tune.replay.draft_model import DraftModel, forced_on_server
from specdeck.core.tune.replay.proof import Counted, run_on_server
from specdeck.core.tune.replay.session import Setting, replay

pytestmark = pytest.mark.slow

FLAGS = ("-t", "1", "-c", "1024")  # one thread: two spin against each other on a busy CPU
MAX_NEW = 40
SETTINGS = (
    Setting.of("ngram-simple", size_n=3, size_m=6),
    Setting.of("ngram-map-k", size_n=2, size_m=8),
    Setting.of("ngram-map-k4v", size_n=2, size_m=6, min_hits=1),
    Setting.of("ngram-mod", n_match=4, n_max=8, n_min=1),
    Setting.of("ngram-cache"),
)


def _server(llama_bin, demo_gguf, tmp_path, name, flags) -> ManagedServer:
    server = ManagedServer(LaunchProfile(str(llama_bin), str(demo_gguf), FLAGS + flags),
                           tmp_path / f"{name}.log")
    server.start(timeout=120)
    return server


@pytest.fixture(scope="module")
def plain_runs(llama_bin, demo_gguf, tmp_path_factory):
    suite = builtin_suites()["grounded"]
    prompts = [(p.id, p.text) for p in suite.prompts[:2]]
    plain = _server(llama_bin, demo_gguf, tmp_path_factory.mktemp("plain"), "plain", ())
    try:
        runs = capture(Base.parse(plain.url), prompts, MAX_NEW)
    finally:
        plain.stop()
    requests = [r.request for r in runs]
    assert all(len(r.output) == MAX_NEW for r in requests)
    return requests


def test_each_ngram_type_replays_to_the_servers_own_counters(llama_bin, demo_gguf, tmp_path,
                                                            plain_runs):
    requests = plain_runs
    drafted_somewhere = 0
    for setting in SETTINGS:
        server = _server(llama_bin, demo_gguf, tmp_path, setting.kinds[0], setting.flags())
        try:
            done = run_on_server(Base.parse(server.url), requests)
            counted, own = done.counted, done.own
        finally:
            server.stop()
        assert [o.output for o in own] == [r.output for r in requests], setting.label
        total, _ = replay(setting, requests, n_ctx=1024)
        assert Counted.of(total) == counted, setting.label
        drafted_somewhere += counted.drafts > 0
    assert drafted_somewhere == len(SETTINGS)  # every type drafted: the check compared counts


def test_a_draft_gguf_is_predicted_from_its_teacher_forced_pass(llama_bin, demo_gguf,
                                                               tmp_path, plain_runs):
    """The demo model requantized to Q4_0 as the draft: its forced pass on a plain server
    of it, replayed in llama-server's loop at n_max 4, gives the drafting server's counts
    (exactly on this machine; a token either way is allowed per count, since another CPU's
    kernels may round a near-tie of the two passes apart)."""
    draft = tmp_path / "draft-Q4_0.gguf"
    subprocess.run([str(llama_bin.parent / "llama-quantize"), "--allow-requantize",
                    str(demo_gguf), str(draft), "Q4_0"], check=True, capture_output=True,
                   timeout=300)
    requests = plain_runs
    server = _server(llama_bin, draft, tmp_path, "draft-alone", ("-np", "1"))
    try:
        forced = {DraftModel.key(r): forced_on_server(Base.parse(server.url), r)
                  for r in requests}
    finally:
        server.stop()
    setting = Setting.of("draft-simple", n_max=4)
    drafting = _server(llama_bin, demo_gguf, tmp_path, "drafting",
                       ("-md", str(draft), "-td", "1", *setting.flags()))
    try:
        done = run_on_server(Base.parse(drafting.url), requests)
        counted, own = done.counted, done.own
    finally:
        drafting.stop()
    assert [o.output for o in own] == [r.output for r in requests]
    total, _ = replay(setting, requests, n_ctx=1024, draft_model=DraftModel(forced, n_max=4))
    predicted = Counted.of(total)
    assert 0 < counted.accepted < counted.drafted

    def near(mine: int, theirs: int) -> bool:
        return abs(mine - theirs) <= max(1.0, 0.02 * theirs)

    assert near(predicted.drafts, counted.drafts) and near(predicted.drafted, counted.drafted)
    assert len(predicted.per_pos) == len(counted.per_pos) == 4
    assert all(near(a, b) for a, b in zip(predicted.per_pos, counted.per_pos, strict=True))
