"""A draft model predicted from one teacher-forced pass (core.tune.replay.draft_model), held
against SpecDeck's own PyTorch engine: its per-position drafted and accepted counts, steps and
draft steps must equal the prediction's, for fixed and adaptive k. Tiny real Llama models:
the cycling target and a noisy copy as its draft (tests/tiny_models.py), whose drafts are
right often at the first positions and less often further on."""

from __future__ import annotations

import pytest
from specdeck.core.engines.base import (
    NO_DRAFT,
    DrafterKind,
    DrafterSpec,
    GenerationRequest,
    LoadSpec,
)
from specdeck.core.tune.replay.draft_model import (
    DraftModel,
    TeacherForced,
    forced_in_torch,
    torch_engine_counts,
)
from specdeck.core.tune.replay.session import Request, Setting, replay
from tiny_models import cycling_llama

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specdeck.core.engines.torch_ref import TorchEngine  # noqa: E402

PROMPTS = ("one two three four", "The quick brown fox jumps over", "1 2 3 4 5 6 7 8 9")
MAX_NEW = 32


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The engine on the target, the draft's folder and model, and each prompt's plain run."""
    root = tmp_path_factory.mktemp("replay-draft")
    target = cycling_llama(root / "target")
    draft = cycling_llama(root / "draft", noise=3.0, seed=3)
    engine = TorchEngine()
    engine.load(LoadSpec(target, device="cpu"))
    model = transformers.AutoModelForCausalLM.from_pretrained(draft, dtype=torch.float32)
    engine.set_drafter(NO_DRAFT)
    plain = {}
    for prompt in PROMPTS:
        ids = tuple(engine.tokenize(prompt))
        result = engine.generate(GenerationRequest(prompt=prompt, max_new_tokens=MAX_NEW,
                                                   stop_on_eos=False, prompt_ids=ids))
        plain[prompt] = Request(ids, tuple(result.token_ids), MAX_NEW)
    yield engine, draft, model, plain
    engine.unload()


@pytest.mark.slow
@pytest.mark.parametrize(("k", "adaptive"), [(4, False), (8, True)])
def test_teacher_forced_pass_predicts_the_engines_own_counts(pair, k, adaptive):
    engine, draft, model, plain = pair
    engine.set_drafter(DrafterSpec(DrafterKind.MODEL, model_path=draft, num_draft_tokens=k,
                                   adaptive=adaptive))
    compared = 0
    for prompt in PROMPTS:
        request = plain[prompt]
        forced = forced_in_torch(model, request)
        assert len(forced.argmax) == len(request.output)
        drafted, accepted, steps, draft_steps = torch_engine_counts(forced, request, k,
                                                                    adaptive=adaptive)
        real = engine.generate(GenerationRequest(prompt=prompt, max_new_tokens=MAX_NEW,
                                                 stop_on_eos=False, prompt_ids=request.prompt))
        assert tuple(real.token_ids) == request.output  # greedy: the output is the target's
        s = real.stats
        assert (tuple(drafted), tuple(accepted), steps, draft_steps) == (
            s.per_position_drafted, s.per_position_accepted, s.steps, s.draft_steps)
        compared += 0 < s.accepted < s.drafted
    assert compared  # some prompt had drafts both kept and rejected: the counts said something


def test_the_forced_pass_is_the_drafts_argmax_given_the_true_prefix(pair):
    _, _, model, plain = pair
    request = plain[PROMPTS[0]]
    forced = forced_in_torch(model, request)
    for j in (0, 5, 17):
        ids = torch.tensor([list(request.prompt) + list(request.output[:j])])
        with torch.inference_mode():
            row = model(ids).logits[0, -1]
        assert forced.argmax[j] == int(row.argmax())
        top = torch.topk(row.float(), 10).values
        assert forced.p[j] == pytest.approx(float(torch.softmax(top, -1)[0]), rel=1e-5)


def test_llama_servers_loop_stops_at_p_min_and_drops_drafts_under_n_min():
    """draft-simple in llama-server's loop: a token under p_min ends the draft before it; a
    draft shorter than n_min is dropped; tokens after the first wrong one are never accepted
    (as many as n_max allows with p_min 0)."""
    out = (5, 6, 7, 8, 9, 10, 11, 12)
    request = Request((1, 2, 3), out, n_predict=len(out))
    forced = TeacherForced((5, 6, 0, 8, 9, 10, 11, 12), (0.9, 0.9, 0.2, 0.9, 0.9, 0.3, 0.9, 0.9))
    key = DraftModel.key(request)
    total, _ = replay(Setting.of("draft-simple", n_max=4), [request],
                      draft_model=DraftModel({key: forced}, n_max=4))
    # t=1: [6, 0 (wrong), ?, ?]: 1 accepted; t=3: [8, 9, 10, 11], all 4; t=8 is the end
    assert [(s.drafted, s.accepted) for s in total.steps] == [(4, 1), (4, 4)]
    strict = DraftModel({key: forced}, n_max=4, p_min=0.5)
    total, _ = replay(Setting.of("draft-simple", n_max=4, p_min=0.5), [request],
                      draft_model=strict)
    # t=1: [6], then 0.2 < 0.5 stops it; t=3: [8, 9], then 0.3; t=6: 1 token left to draft
    assert [(s.drafted, s.accepted) for s in total.steps] == [(1, 1), (2, 2), (1, 1)]
    picky = DraftModel({key: forced}, n_max=4, p_min=0.5, n_min=2)
    total, _ = replay(Setting.of("draft-simple", n_max=4, p_min=0.5, n_min=2), [request],
                      draft_model=picky)
    # [6] and the last step's [11] (cut to what is left before the n_min test) are dropped
    assert [(s.drafted, s.accepted) for s in total.steps] == [(2, 2)]
    assert total.plain_steps == 1 + 1 + 1 + 2
