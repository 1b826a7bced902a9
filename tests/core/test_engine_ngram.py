"""Prompt lookup (n-gram drafting): proposes only on a real match, copies what followed."""

from __future__ import annotations

from conftest import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st
from specdeck.core.engines.ngram import PromptLookup


def test_proposes_what_followed_the_latest_earlier_occurrence():
    lookup = PromptLookup(ngram_max=3, ngram_min=2)
    lookup.reset([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2])
    # "1 2" occurred at 0 and 6; the latest is followed by 3 7 8.
    assert lookup.match() == (2, 8)
    assert lookup.propose(3) == [3, 7, 8]
    assert lookup.propose(1) == [3]


def test_longest_match_wins():
    lookup = PromptLookup(ngram_max=3, ngram_min=1)
    lookup.reset([5, 1, 2, 40, 7, 2, 41, 9, 1, 2])
    # 1-gram "2" last occurred before 41, but the 2-gram "1 2" says 40.
    assert lookup.propose(1) == [40]


def test_nothing_without_a_match_of_at_least_ngram_min_tokens():
    lookup = PromptLookup(ngram_max=4, ngram_min=2)
    lookup.reset([1, 2, 3, 4, 5, 6, 3])
    assert lookup.match() is None  # "6 3" never occurred; "3" alone is too short
    assert lookup.propose(4) == []
    assert PromptLookup(4, 1).propose(4) == []  # empty sequence


def test_a_match_shorter_than_ngram_min_drafts_at_most_short_tokens():
    ids = [1, 2, 3, 4, 5, 6, 3]  # only the 1-gram "3" matches; 4 5 6 3 followed it
    one = PromptLookup(ngram_max=4, ngram_min=2, short_tokens=1)
    one.reset(ids)
    assert one.propose(4) == [4]
    assert PromptLookup(ngram_max=4, ngram_min=2, short_tokens=2).propose(4) == []  # empty
    lookup = PromptLookup(ngram_max=4, ngram_min=2, short_tokens=2)
    lookup.reset(ids)
    assert lookup.match() == (1, 3)
    assert lookup.propose(4) == [4, 5]
    assert lookup.propose(1) == [4]
    # A match of ngram_min or more still drafts the full k.
    lookup.extend([4])
    assert lookup.match() == (2, 4)
    assert lookup.propose(4) == [5, 6, 3, 4]
    # short_tokens=0 is the old rule: nothing below ngram_min.
    none = PromptLookup(ngram_max=4, ngram_min=2, short_tokens=0)
    none.reset(ids)
    assert none.match() is None and none.propose(4) == []


def test_the_suffix_never_matches_itself():
    lookup = PromptLookup(ngram_max=2, ngram_min=2)
    lookup.reset([7, 8])
    assert lookup.propose(4) == []
    lookup.extend([9, 7, 8])
    assert lookup.propose(2) == [9, 7]


def test_a_repeating_pattern_is_continued_past_the_end():
    lookup = PromptLookup(ngram_max=2, ngram_min=2)
    lookup.reset([1, 2, 1, 2])
    # Period 2: the copy runs into the sequence's own end and keeps cycling.
    assert lookup.propose(5) == [1, 2, 1, 2, 1]
    lookup.reset([4, 4, 4])
    assert lookup.propose(3) == [4, 4, 4]


def test_extend_indexes_new_tokens_incrementally():
    lookup = PromptLookup(ngram_max=3, ngram_min=2)
    lookup.reset([10, 11, 12])
    lookup.extend([13])
    lookup.extend([10, 11])
    assert lookup.propose(2) == [12, 13]
    assert list(lookup.ids) == [10, 11, 12, 13, 10, 11]


def test_real_tokenizer_prompt_lookup_on_a_rewrite():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODELS / "TinyLlama-1.1B-Chat-v1.0" / "tokenizer.json"))
    prompt = "Fix the typos: The council will vote on the plan next month after a meeting."
    answer_so_far = " The council will vote"
    lookup = PromptLookup(ngram_max=4, ngram_min=2)
    lookup.reset(tok.encode(prompt + "\n" + answer_so_far, add_special_tokens=False).ids)
    draft = lookup.propose(4)
    assert tok.decode(draft).startswith("on the plan")


def _brute_force(ids: list[int], nmax: int, nmin: int, k: int, short: int = 0) -> list[int]:
    for n in range(nmax, (1 if short else nmin) - 1, -1):
        if len(ids) <= n:
            continue
        suffix = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start : start + n] == suffix:
                follow = start + n
                if n < nmin:
                    k = min(k, short)
                out = []
                while len(out) < k:
                    pos = follow + len(out)
                    out.append(ids[pos] if pos < len(ids) else out[len(out) - (len(ids) - follow)])
                return out
    return []


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(st.integers(0, 5), min_size=0, max_size=40),
    nmax=st.integers(1, 4),
    extra=st.integers(0, 3),
    k=st.integers(1, 6),
    split=st.integers(0, 40),
    short=st.integers(0, 3),
)
def test_matches_a_brute_force_search(ids, nmax, extra, k, split, short):
    nmin = max(1, nmax - extra)
    lookup = PromptLookup(ngram_max=nmax, ngram_min=nmin, short_tokens=short)
    lookup.reset(ids[:split])
    lookup.extend(ids[split:])
    assert lookup.propose(k) == _brute_force(ids, nmax, nmin, k, short)
