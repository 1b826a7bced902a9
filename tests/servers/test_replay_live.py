"""Replay against the real llama-server: one plain run of two grounded prompts, then each
n-gram spec type on its own server with the same requests; the replayed counts must equal
the server's own /metrics counters, position by position (core.tune.replay). And a draft
model predicted from its teacher-forced pass on a plain server of the draft GGUF, and run in
llama-server's loop on that server with the drafting server's batches."""

from __future__ import annotations

import subprocess

import pytest
from specdeck.core.bench.suites import builtin_suites
from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer
from specdeck.core.servers.transport import Base
from specdeck.core.tune.replay.capture import capture
from specdeck.core.tune.replay.draft_model import (
    DraftModel,
    DraftOnServer,
    forced_on_server,
)
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


@pytest.fixture(scope="module")
def draft_gguf(llama_bin, demo_gguf, tmp_path_factory):
    """The demo model requantized to Q4_0: a draft that is right often, not always."""
    draft = tmp_path_factory.mktemp("draft") / "draft-Q4_0.gguf"
    subprocess.run([str(llama_bin.parent / "llama-quantize"), "--allow-requantize",
                    str(demo_gguf), str(draft), "Q4_0"], check=True, capture_output=True,
                   timeout=300)
    return draft


def test_a_draft_gguf_is_predicted_from_its_teacher_forced_pass(llama_bin, demo_gguf,
                                                               draft_gguf, tmp_path,
                                                               plain_runs):
    """The demo model requantized to Q4_0 as the draft: its forced pass on a plain server
    of it, replayed in llama-server's loop at n_max 4, gives the drafting server's counts
    (exactly on this machine; a token either way is allowed per count, since another CPU's
    kernels may round a batch of a few rows unlike a single row and so a near-tie of the two
    apart). llama-server's loop run on the same plain server with the batches the drafting
    server writes its draft's cache by (``DraftOnServer``) gives them exactly, and chose as
    the pass wherever the draft was still on the target's path."""
    requests = plain_runs
    setting = Setting.of("draft-simple", n_max=4)
    server = _server(llama_bin, draft_gguf, tmp_path, "draft-alone", ("-np", "1"))
    try:
        base = Base.parse(server.url)
        forced = {DraftModel.key(r): forced_on_server(base, r) for r in requests}
        loop = DraftOnServer(base, n_max=4)
        looped, _ = replay(setting, requests, n_ctx=1024, draft_model=loop)
    finally:
        server.stop()
    drafting = _server(llama_bin, demo_gguf, tmp_path, "drafting",
                       ("-md", str(draft_gguf), "-td", "1", *setting.flags()))
    try:
        done = run_on_server(Base.parse(drafting.url), requests)
        counted, own = done.counted, done.own
    finally:
        drafting.stop()
    assert [o.output for o in own] == [r.output for r in requests]
    total, _ = replay(setting, requests, n_ctx=1024, draft_model=DraftModel(forced, n_max=4))
    predicted = Counted.of(total)
    assert 0 < counted.accepted < counted.drafted
    assert Counted.of(looped) == counted
    on_path = [(forced[key].argmax[j], token) for key, seen in loop.seen.items()
               for j, (token, _) in seen.items()]
    assert len(on_path) > counted.drafts  # every step's first position, and more
    assert all(mine == theirs for mine, theirs in on_path)

    def near(mine: int, theirs: int) -> bool:
        return abs(mine - theirs) <= max(1.0, 0.02 * theirs)

    assert near(predicted.drafts, counted.drafts) and near(predicted.drafted, counted.drafted)
    assert len(predicted.per_pos) == len(counted.per_pos) == 4
    assert all(near(a, b) for a, b in zip(predicted.per_pos, counted.per_pos, strict=True))


def test_the_pass_decodes_each_prompt_whole_whatever_the_server_decoded_before(
        llama_bin, draft_gguf, tmp_path, plain_runs):
    """A drafting server decodes each request's prompt whole (SpecDeck sends cache_prompt
    false), and the draft's numbers depend on how its prompt was split into batches. So a
    prompt's pass is the same on a fresh server as after another prompt whose chat-template
    opening the slot still holds: to the last digit of every probability."""
    first, other = plain_runs
    server = _server(llama_bin, draft_gguf, tmp_path, "draft-alone", ("-np", "1"))
    try:
        base = Base.parse(server.url)
        fresh = forced_on_server(base, first)
        forced_on_server(base, other)
        again = forced_on_server(base, first)
    finally:
        server.stop()
    assert first.prompt[:20] == other.prompt[:20]  # the slot held an opening it could reuse
    assert again == fresh
