"""Token picking and draft verification: greedy is the target's argmax; sampling is exact."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specdeck.core.engines.base import SamplingSpec
from specdeck.core.engines.sampling import TokenPicker

CPU = torch.device("cpu")


def picker(spec: SamplingSpec | None = None, vocab: int = 6, history=()) -> TokenPicker:
    return TokenPicker(spec or SamplingSpec(), vocab, CPU, history)


def test_greedy_keeps_the_longest_agreeing_prefix_and_adds_the_targets_token():
    rows = torch.tensor(
        [
            [0.0, 5.0, 1.0, 0.0, 0.0, 0.0],  # argmax 1
            [0.0, 0.0, 4.0, 3.5, 0.0, 0.0],  # argmax 2
            [9.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # argmax 0
            [0.0, 0.0, 0.0, 0.0, 0.0, 7.0],  # argmax 5
        ]
    )
    p = picker()
    verdict = p.verify(p.process(rows, [1, 2, 4]), [1, 2, 4], None)
    assert (verdict.accepted, verdict.next_token) == (2, 0)
    assert verdict.top2_gaps == pytest.approx([4.0, 0.5, 9.0])
    verdict = p.verify(p.process(rows, [1, 2, 0]), [1, 2, 0], None)
    assert (verdict.accepted, verdict.next_token) == (3, 5)
    verdict = p.verify(p.process(rows[:1], []), [], None)
    assert (verdict.accepted, verdict.next_token) == (0, 1)


def test_repetition_penalty_row_i_sees_the_first_i_drafts():
    rows = torch.tensor([[2.0, 1.9, 0.0, 0.0], [2.0, 1.9, 0.0, -1.0]])
    p = picker(SamplingSpec(repetition_penalty=1.5), vocab=4, history=[3])
    processed = p.process(rows, [0])
    # Row 0: history {3} only; row 1: {3, 0}, so token 0 is penalised 2.0 -> 1.333.
    assert processed[0].tolist() == pytest.approx([2.0, 1.9, 0.0, 0.0])
    assert processed[1].tolist() == pytest.approx([2.0 / 1.5, 1.9, 0.0, -1.5])
    assert p.verify(processed, [0], None).next_token == 1


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top_p = picker(SamplingSpec(temperature=1.0, top_p=0.75), vocab=4).process(logits)
    assert torch.isfinite(top_p[0]).tolist() == [True, True, False, False]
    top_k = picker(SamplingSpec(temperature=1.0, top_k=3), vocab=4).process(logits)
    assert torch.isfinite(top_k[0]).tolist() == [True, True, True, False]


def test_draft_vocab_is_fitted_to_the_target():
    p = picker(vocab=4)
    assert p.fit_vocab(torch.zeros(1, 6)).shape == (1, 4)
    padded = p.fit_vocab(torch.zeros(1, 3))
    assert padded.shape == (1, 4) and padded[0, 3] == float("-inf")


def _first_token_frequencies(p_target, q_draft, deterministic_token, trials=12000):
    spec = SamplingSpec(temperature=1.0, seed=1234)
    pk = picker(spec, vocab=len(p_target))
    logits = torch.log(torch.tensor([p_target, p_target]))
    processed = pk.process(logits, [0])
    gen = torch.Generator().manual_seed(99)
    counts = torch.zeros(len(p_target))
    q = torch.tensor(q_draft) if q_draft is not None else None
    for _ in range(trials):
        if q is None:
            draft = deterministic_token
            verdict = pk.verify(processed, [draft], None)
        else:
            draft = int(torch.multinomial(q, 1, generator=gen))
            verdict = pk.verify(processed, [draft], [q])
        first = draft if verdict.accepted >= 1 else verdict.next_token
        counts[first] += 1
    return counts / trials


@pytest.mark.parametrize(
    "q_draft",
    [[0.1, 0.1, 0.6, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2], [0.0, 0.0, 0.0, 0.5, 0.5]],
    ids=["peaked-elsewhere", "uniform", "disjoint-support"],
)
def test_sampled_verification_reproduces_the_targets_distribution(q_draft):
    p_target = [0.4, 0.3, 0.1, 0.15, 0.05]
    freq = _first_token_frequencies(p_target, q_draft, None)
    assert freq.tolist() == pytest.approx(p_target, abs=0.02)


def test_deterministic_drafts_are_kept_with_the_targets_probability():
    p_target = [0.4, 0.3, 0.1, 0.15, 0.05]
    freq = _first_token_frequencies(p_target, None, deterministic_token=1)
    assert freq.tolist() == pytest.approx(p_target, abs=0.02)
