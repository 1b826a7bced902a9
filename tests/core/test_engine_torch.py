"""The PyTorch reference engine on tiny real Llama models (transformers, real tokenizer)."""

from __future__ import annotations

import gc
import itertools
import threading
import weakref
from pathlib import Path

import pytest
from conftest import MODELS
from specdeck.core.engines.base import (
    NO_DRAFT,
    DrafterKind,
    DrafterSpec,
    Engine,
    GenerationRequest,
    GenerationResult,
    LoadSpec,
    SamplingSpec,
    StopReason,
)
from specdeck.core.engines.lossless import OutputMatch, compare_greedy
from specdeck.core.errors import InvalidInputError, NotFoundError
from tiny_models import cycling_llama, random_llama

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specdeck.core.engines.torch_ref import TorchEngine

PROMPTS = (
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Once upon a time there was a small robot who wanted to see the sea.",
    "1 2 3 4 5 6 7 8 9 10 11 12",
)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {
        "target": random_llama(root / "target", seed=0),
        "draft": random_llama(root / "draft", seed=1, hidden=32, layers=1),
        "cycle": cycling_llama(root / "cycle"),
        "cycle_eos": cycling_llama(root / "cycle-eos", cycle=(450, 4996, 2, 1701)),
        "mistral_vocab": random_llama(
            root / "mistral-vocab", seed=2, hidden=32, layers=1,
            tokenizer_from=MODELS / "Mistral-7B-v0.1",
        ),
    }


@pytest.fixture(scope="module")
def engine(models) -> TorchEngine:
    engine = TorchEngine()
    engine.load(LoadSpec(models["target"]))
    yield engine
    engine.unload()


def greedy(prompt: str, max_new: int = 48, **kwargs) -> GenerationRequest:
    return GenerationRequest(prompt=prompt, max_new_tokens=max_new, stop_on_eos=False, **kwargs)


def run_with(engine: TorchEngine, drafter: DrafterSpec, request: GenerationRequest,
             **kwargs) -> GenerationResult:
    engine.set_drafter(drafter)
    return engine.generate(request, **kwargs)


def assert_accounting(result: GenerationResult) -> None:
    """The definitions in base.py, for a run that nothing cut short."""
    s = result.stats
    assert s.accepted + s.rejected == s.drafted
    assert 0 <= s.accepted <= s.drafted
    assert s.new_tokens == len(result.token_ids) == s.steps + s.accepted
    assert sum(result.from_draft) == s.accepted
    assert s.draft_steps <= s.steps
    if s.drafted:
        assert s.per_position_drafted[0] == s.draft_steps
        assert sum(s.per_position_drafted) == s.drafted
        assert sum(s.per_position_accepted) == s.accepted
        assert all(a <= d for a, d in zip(s.per_position_accepted, s.per_position_drafted))
        # Acceptance is a prefix per step, so it can only fall with the position.
        assert list(s.per_position_accepted) == sorted(s.per_position_accepted, reverse=True)


def test_engine_satisfies_the_protocol():
    assert isinstance(TorchEngine(), Engine)


def test_load_describes_what_was_loaded(engine, models):
    loaded = engine.loaded
    assert loaded.engine == "torch"
    assert loaded.model_path == models["target"]
    assert (loaded.device, loaded.dtype) == ("cpu", "float32")
    assert loaded.vocab_size == 32000
    assert loaded.eos_token_ids == (2,)
    assert loaded.max_seq_len == 512
    assert loaded.drafter == NO_DRAFT


@pytest.mark.parametrize(
    "drafter",
    [
        DrafterSpec(DrafterKind.NGRAM),
        DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=1),
        DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=8, ngram_min=1, ngram_max=3),
        DrafterSpec(DrafterKind.NGRAM, adaptive=False),
        DrafterSpec(DrafterKind.MODEL, model_path=Path("SELF")),
        DrafterSpec(DrafterKind.MODEL, model_path=Path("DRAFT"), num_draft_tokens=3),
        DrafterSpec(DrafterKind.MODEL, model_path=Path("DRAFT"), adaptive=False),
    ],
    ids=["ngram-k4", "ngram-k1", "ngram-k8-min1", "ngram-fixed-k", "self-draft", "draft-model",
         "draft-model-fixed-k"],
)
def test_every_drafter_reproduces_the_baseline_token_for_token(engine, models, drafter):
    from dataclasses import replace

    if drafter.model_path == Path("SELF"):
        drafter = replace(drafter, model_path=models["target"])
    elif drafter.model_path == Path("DRAFT"):
        drafter = replace(drafter, model_path=models["draft"])
    for prompt in PROMPTS:
        baseline = run_with(engine, NO_DRAFT, greedy(prompt))
        speculative = run_with(engine, drafter, greedy(prompt))
        assert speculative.token_ids == baseline.token_ids
        assert speculative.text == baseline.text
        assert compare_greedy(baseline, speculative).verdict is OutputMatch.IDENTICAL
        assert speculative.drafter == drafter
        assert_accounting(speculative)
        assert_accounting(baseline)
        assert baseline.stats.steps == baseline.stats.new_tokens
        assert baseline.stats.drafted == 0


def test_self_drafting_accepts_every_drafted_token(engine, models):
    drafter = DrafterSpec(DrafterKind.MODEL, model_path=models["target"], num_draft_tokens=4)
    result = run_with(engine, drafter, greedy(PROMPTS[1], max_new=41))
    s = result.stats
    assert s.drafted > 0
    assert s.accepted == s.drafted
    assert s.acceptance_rate == 1.0
    # 41 tokens at 5 per step (4 drafts + the target's own): 8 full steps + 1 single token.
    assert s.steps == 9
    assert s.per_position_acceptance == (1.0, 1.0, 1.0, 1.0)
    assert "shares the target's weights" in " ".join(engine.loaded.notes)


def test_random_draft_model_is_rejected_but_output_unchanged(engine, models):
    drafter = DrafterSpec(DrafterKind.MODEL, model_path=models["draft"], num_draft_tokens=3)
    result = run_with(engine, drafter, greedy(PROMPTS[0]))
    # A draft model proposes at every step that has room for a draft (all but maybe the last).
    assert result.stats.draft_steps >= result.stats.steps - 1
    assert result.stats.acceptance_rate < 0.5  # a random 1-layer model rarely agrees


def test_adaptive_drafting_shrinks_after_rejections_and_regrows(engine, models):
    from specdeck.core.engines.speculative import DraftLength

    length = DraftLength(6)
    assert length.allowed == 6
    length.update(6, 0)  # missed from the first token: halve
    assert length.allowed == 3
    length.update(3, 0)
    length.update(1, 0)
    assert length.allowed == 1
    length.update(1, 1)  # kept whole: 2 more
    assert length.allowed == 3
    length.update(3, 1)  # partly kept: unchanged
    assert length.allowed == 3
    length.update(0, 0)  # nothing proposed: no news
    assert length.allowed == 3
    length.update(3, 3)
    length.update(5, 5)
    assert length.allowed == 6
    draft = models["draft"]
    fixed = run_with(engine, DrafterSpec(DrafterKind.MODEL, model_path=draft, num_draft_tokens=6,
                                         adaptive=False), greedy(PROMPTS[0]))
    adaptive = run_with(engine, DrafterSpec(DrafterKind.MODEL, model_path=draft,
                                            num_draft_tokens=6), greedy(PROMPTS[0]))
    assert adaptive.token_ids == fixed.token_ids
    # A random draft is rejected at once: fixed k keeps drafting 6, adaptive drops to 1.
    # (all but the last few steps, whose budget is under 7 tokens)
    assert fixed.stats.per_position_drafted[5] >= fixed.stats.draft_steps - 6
    assert adaptive.stats.drafted < fixed.stats.drafted / 3


def test_ngram_on_repeating_output_accepts_nearly_everything(models):
    engine = TorchEngine()
    engine.load(LoadSpec(models["cycle"], drafter=DrafterSpec(DrafterKind.NGRAM)))
    result = engine.generate(greedy("Hello there", max_new=60))
    assert result.text.startswith(" The quick brown fox The quick brown fox")
    s = result.stats
    assert_accounting(result)
    assert s.acceptance_rate >= 0.9
    assert s.mean_acceptance_length > 3.0  # the first 7 tokens have nothing to copy yet
    assert s.steps < s.new_tokens / 3
    baseline = run_with(engine, NO_DRAFT, greedy("Hello there", max_new=60))
    assert baseline.token_ids == result.token_ids


def test_ngram_drafter_proposes_nothing_without_a_match(models):
    engine = TorchEngine()
    strict = DrafterSpec(DrafterKind.NGRAM, ngram_min=4, ngram_short=0)
    engine.load(LoadSpec(models["cycle"], drafter=strict))
    # Until the cycle has repeated once, no 4-gram of the sequence occurred before.
    result = engine.generate(GenerationRequest(prompt_ids=(1, 15043), max_new_tokens=6))
    assert result.stats.drafted == 0
    assert result.stats.steps == 6


def test_events_add_up_to_the_result(engine, models):
    events = []
    drafter = DrafterSpec(DrafterKind.MODEL, model_path=models["target"])
    result = run_with(engine, drafter, greedy(PROMPTS[2], max_new=30), on_event=events.append)
    assert "".join(e.text for e in events) == result.text
    assert tuple(t for e in events for t in e.token_ids) == result.token_ids
    assert tuple(f for e in events for f in e.from_draft) == result.from_draft
    assert [e.step for e in events] == list(range(1, len(events) + 1))
    assert all(a.elapsed_s <= b.elapsed_s for a, b in itertools.pairwise(events))
    last = events[-1]
    assert last.new_tokens == result.stats.new_tokens
    assert last.total_drafted == result.stats.drafted
    assert last.total_accepted == result.stats.accepted
    for event in events:
        assert len(event.token_ids) == event.accepted + 1
        assert event.from_draft == (True,) * event.accepted + (False,)


def test_timings_and_memory_are_reported(engine):
    result = run_with(engine, NO_DRAFT, greedy(PROMPTS[0], max_new=8))
    s = result.stats
    assert s.prompt_tokens == len(result.prompt_ids) == len(engine.tokenize(PROMPTS[0]))
    assert s.prefill_s > 0 and s.decode_s > 0
    assert s.time_to_first_token_s >= s.prefill_s
    assert s.tokens_per_second == pytest.approx(s.new_tokens / s.decode_s)
    assert s.memory_kind == "rss" and s.peak_memory_bytes > 10 * 2**20
    assert s.stop_reason is StopReason.MAX_NEW_TOKENS


def test_stops_at_eos_and_keeps_it_out_of_the_text(models):
    engine = TorchEngine()
    engine.load(LoadSpec(models["cycle_eos"]))
    result = engine.generate(GenerationRequest(prompt="Hi", max_new_tokens=20))
    assert result.token_ids == (450, 4996, 2)
    assert result.stats.stop_reason is StopReason.EOS
    assert result.text == " The quick"  # a continuation of "Hi": the space is kept
    free_running = engine.generate(
        GenerationRequest(prompt="Hi", max_new_tokens=9, stop_on_eos=False)
    )
    assert free_running.token_ids == (450, 4996, 2, 1701, 450, 4996, 2, 1701, 450)
    assert free_running.stats.stop_reason is StopReason.MAX_NEW_TOKENS


def test_eos_inside_an_accepted_draft_ends_the_run_there(models):
    engine = TorchEngine()
    engine.load(LoadSpec(models["cycle_eos"], drafter=DrafterSpec(DrafterKind.NGRAM)))
    # The prompt already holds the cycle, so the first step drafts "4996 2 1701 450".
    result = engine.generate(
        GenerationRequest(prompt_ids=(1, 1701, 450, 4996, 2, 1701, 450), max_new_tokens=20)
    )
    assert result.token_ids == (4996, 2)
    assert result.from_draft == (True, True)
    assert result.stats.stop_reason is StopReason.EOS
    # Only drafts up to the EOS count: 2 drafted, 2 accepted, in one step.
    assert (result.stats.steps, result.stats.drafted, result.stats.accepted) == (1, 2, 2)


def test_max_new_tokens_is_exact_with_drafting(models):
    engine = TorchEngine()
    engine.load(LoadSpec(models["cycle"], drafter=DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=8)))
    for limit in (1, 2, 7, 13):
        result = engine.generate(greedy("Hello", max_new=limit))
        assert len(result.token_ids) == limit
        assert_accounting(result)


def test_cancel_mid_run_returns_what_was_made_and_the_engine_stays_usable(engine):
    engine.set_drafter(NO_DRAFT)
    cancel = threading.Event()

    def stop_after_three(event):
        if event.step == 3:
            cancel.set()

    partial = engine.generate(greedy(PROMPTS[0], max_new=40), stop_after_three, cancel)
    assert partial.stats.stop_reason is StopReason.CANCELLED
    assert partial.stats.steps == 3 and len(partial.token_ids) == 3
    full = engine.generate(greedy(PROMPTS[0], max_new=40))
    assert full.token_ids[:3] == partial.token_ids
    assert compare_greedy(full, partial).verdict is OutputMatch.PREFIX
    assert len(full.token_ids) == 40


def test_cancel_before_start_generates_nothing(engine):
    cancel = threading.Event()
    cancel.set()
    result = engine.generate(greedy(PROMPTS[0]), cancel=cancel)
    assert result.token_ids == ()
    assert result.stats.stop_reason is StopReason.CANCELLED


def test_set_drafter_parks_a_draft_between_arms_and_frees_it_when_replaced(models):
    engine = TorchEngine()
    engine.load(LoadSpec(models["target"]))
    target = weakref.ref(engine._target.model)
    draft_spec = DrafterSpec(DrafterKind.MODEL, model_path=models["draft"])
    engine.set_drafter(draft_spec)
    draft = weakref.ref(engine._draft.model)
    # Arms without a draft model keep it parked: an interleaved A/B does not reload it.
    engine.set_drafter(DrafterSpec(DrafterKind.NGRAM))
    engine.set_drafter(NO_DRAFT)
    gc.collect()
    assert draft() is engine._draft.model
    assert engine.loaded.drafter == NO_DRAFT
    engine.set_drafter(draft_spec)
    assert draft() is engine._draft.model  # reused, not reloaded
    # Another draft model replaces it (here the target drafting for itself).
    engine.set_drafter(DrafterSpec(DrafterKind.MODEL, model_path=models["target"]))
    gc.collect()
    assert draft() is None
    assert target() is engine._target.model
    engine.unload()


def test_events_split_draft_text_from_the_targets_own(models):
    engine = TorchEngine()
    engine.load(LoadSpec(models["cycle"], drafter=DrafterSpec(DrafterKind.NGRAM)))
    events = []
    result = engine.generate(greedy("Hello there", max_new=40), on_event=events.append)
    assert "".join(e.text for e in events) == result.text
    assert all(e.draft_chars is not None and 0 <= e.draft_chars <= len(e.text) for e in events)
    assert all(e.draft_chars == 0 for e in events if e.accepted == 0)
    highlighted = sum(e.draft_chars for e in events)
    assert 0.5 * len(result.text) < highlighted < len(result.text)
    engine.unload()


def test_unload_frees_the_models(models):
    engine = TorchEngine()
    engine.load(LoadSpec(models["target"], drafter=DrafterSpec(DrafterKind.MODEL, model_path=models["draft"])))
    engine.generate(greedy(PROMPTS[0], max_new=4))
    refs = [weakref.ref(engine._target.model), weakref.ref(engine._draft.model)]
    engine.unload()
    gc.collect()
    assert [r() for r in refs] == [None, None]
    assert engine.loaded is None
    with pytest.raises(InvalidInputError, match="No model is loaded"):
        engine.generate(greedy(PROMPTS[0]))


def test_without_prepacking_the_tokens_are_the_same(models):
    plain, packed = TorchEngine(prepack=False), TorchEngine(prepack=True)
    plain.load(LoadSpec(models["target"]))
    packed.load(LoadSpec(models["target"]))
    assert not any("pre-packed" in note for note in plain.loaded.notes)
    assert any("pre-packed for oneDNN" in note for note in packed.loaded.notes)
    for prompt in PROMPTS:
        assert plain.generate(greedy(prompt)).token_ids == packed.generate(greedy(prompt)).token_ids
    plain.unload()
    packed.unload()


@pytest.mark.parametrize("packed_cost, kept", [(0.5, True), (1.0, True), (2.0, False)])
def test_by_default_packing_is_kept_only_where_a_one_token_forward_is_not_slower(
        models, monkeypatch, packed_cost, kept):
    """The no-draft arm is every speed-up's anchor: on a CPU where oneDNN's packed layers
    make plain decoding slower (a 2-core Xeon here), the engine keeps F.linear. A controlled
    clock makes a packed forward cost ``packed_cost`` plain forwards, so each branch runs on
    any machine: the choice follows the two medians, the model holds the layers it chose, and
    the note says which and why. The wall clock, meanwhile, says the opposite (another program
    took the cores during the other kind's forwards): the choice is made on CPU time (issue
    44: on a busy machine the wall clock had left the layers plain, making decoding 1.34x and
    an n-gram verify step 1.35x dearer than packed)."""
    from specdeck.core.engines import cpu_linear
    from torch import nn

    mode, now, wall = {"packed": False}, [0.0], [0.0]
    real_use = cpu_linear.Packing.use

    def use(self, packed):
        mode["packed"] = packed
        return real_use(self, packed)

    class Clock:
        @staticmethod
        def process_time():
            # Every reading after a forward has advanced by that forward's cost: one reading
            # before and one after each timed forward.
            now[0] += 0.5e-3 * (packed_cost if mode["packed"] else 1.0)
            return now[0]

        @staticmethod
        def perf_counter():
            wall[0] += 0.5e-3 * (1.0 if mode["packed"] else packed_cost)
            return wall[0]

    monkeypatch.setattr(cpu_linear.Packing, "use", use)
    monkeypatch.setattr(cpu_linear, "time", Clock)
    engine = TorchEngine()
    engine.load(LoadSpec(models["target"]))
    try:
        choice = engine.loaded_packing()
        assert choice.packed_ms == pytest.approx(packed_cost * choice.plain_ms)
        assert (choice.packed_layers > 0) is kept
        model, _ = engine.model_objects()
        kinds = {type(m) for m in model.modules() if isinstance(m, (nn.Linear, cpu_linear.PackedLinear))}
        assert kinds == ({cpu_linear.PackedLinear} if kept else {nn.Linear})
        note = choice.note()
        assert note in engine.loaded.notes and f"{choice.plain_ms:.1f} ms plain" in note
        assert ("pre-packed" in note) is kept
    finally:
        engine.unload()


def test_sampling_is_reproducible_with_a_seed_and_labelled(engine, models):
    sampling = SamplingSpec(temperature=0.9, top_k=40, top_p=0.95, seed=7)
    request = greedy(PROMPTS[1], max_new=24, sampling=sampling)
    first = run_with(engine, NO_DRAFT, request)
    again = run_with(engine, NO_DRAFT, request)
    assert first.token_ids == again.token_ids
    assert first.sampling.label.startswith("sampled (T=0.9")
    assert first.top2_gaps == ()  # gaps are a greedy-only diagnostic
    other = run_with(engine, NO_DRAFT, greedy(PROMPTS[1], max_new=24,
                                              sampling=SamplingSpec(temperature=0.9, seed=8)))
    assert other.token_ids != first.token_ids


def test_sampled_self_drafting_keeps_the_drafts(engine, models):
    drafter = DrafterSpec(DrafterKind.MODEL, model_path=models["target"])
    sampling = SamplingSpec(temperature=0.8, seed=3)
    result = run_with(engine, drafter, greedy(PROMPTS[0], max_new=30, sampling=sampling))
    # p == q up to float rounding: the acceptance test keeps (virtually) every draft.
    assert result.stats.acceptance_rate >= 0.95
    assert_accounting(result)


def test_greedy_gaps_are_reported_per_token(engine):
    result = run_with(engine, DrafterSpec(DrafterKind.NGRAM), greedy(PROMPTS[0], max_new=20))
    assert len(result.top2_gaps) == len(result.token_ids)
    assert all(g >= 0 for g in result.top2_gaps)


def test_chat_template_is_applied(engine):
    plain = engine.tokenize("Hello")
    chat = engine.tokenize("Hello", apply_chat_template=True)
    assert len(chat) > len(plain)
    assert "<|user|>" in engine._target.tokenizer.decode(chat)


# errors ---------------------------------------------------------------------------------
def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(NotFoundError, match="does not exist"):
        TorchEngine().load(LoadSpec(tmp_path / "nope"))


def test_exl2_folder_points_to_the_exllamav2_engine(tmp_path, models):
    folder = tmp_path / "exl2"
    folder.mkdir()
    config = (models["target"] / "config.json").read_text()
    import json

    data = json.loads(config)
    data["quantization_config"] = {"quant_method": "exl2", "bits": 4.0, "head_bits": 6}
    (folder / "config.json").write_text(json.dumps(data))
    with pytest.raises(InvalidInputError, match="exllamav2 engine"):
        TorchEngine().load(LoadSpec(folder))


def test_folder_without_tokenizer_is_refused(tmp_path, models):
    import shutil

    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(models["target"] / name, folder / name)
    with pytest.raises(InvalidInputError, match="no tokenizer files"):
        TorchEngine().load(LoadSpec(folder))


def test_draft_with_another_tokenizer_is_refused_and_the_target_stays(models):
    engine = TorchEngine()
    engine.load(LoadSpec(models["target"]))
    engine.set_drafter(DrafterSpec(DrafterKind.MODEL, model_path=models["draft"]))
    # The same check as `specdeck check` (core.compat), not a rule of the engine's own.
    with pytest.raises(InvalidInputError, match=r"Draft mistral-vocab, target target: This draft "
                       r"cannot speculate for this target \(Token text, id by id\)\. [\d,]+ of "
                       r"[\d,]+ ids 5–[\d,]+ carry different text \(first: id"):
        engine.set_drafter(DrafterSpec(DrafterKind.MODEL, model_path=models["mistral_vocab"]))
    # Neither draft is loaded now: the target runs alone and says so (no stale MODEL label).
    assert engine.loaded.drafter == NO_DRAFT
    result = engine.generate(greedy(PROMPTS[0], max_new=3))
    assert len(result.token_ids) == 3 and result.drafter == NO_DRAFT and result.stats.drafted == 0
    with pytest.raises(NotFoundError):
        engine.set_drafter(DrafterSpec(DrafterKind.MODEL, model_path=models["draft"].parent / "gone"))
    assert engine.loaded.drafter == NO_DRAFT
    engine.unload()


def test_prompt_longer_than_the_context_is_refused(engine):
    with pytest.raises(InvalidInputError, match="is 520 tokens, more than the 512-token context"):
        engine.generate(GenerationRequest(prompt_ids=tuple(range(100, 600)), max_new_tokens=20))


def test_prompt_ids_outside_the_vocabulary_are_refused(engine):
    with pytest.raises(InvalidInputError, match="outside the model's vocabulary"):
        engine.generate(GenerationRequest(prompt_ids=(1, 32000), max_new_tokens=2))


def test_empty_prompt_is_refused(engine):
    with pytest.raises(InvalidInputError, match="empty"):
        engine.generate(GenerationRequest(prompt=""))


def test_bad_specs_are_refused_where_they_are_made():
    with pytest.raises(InvalidInputError, match="num_draft_tokens"):
        DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=0)
    with pytest.raises(InvalidInputError, match="n-gram sizes"):
        DrafterSpec(DrafterKind.NGRAM, ngram_min=3, ngram_max=2)
    with pytest.raises(InvalidInputError, match="needs the draft model"):
        DrafterSpec(DrafterKind.MODEL)
    with pytest.raises(InvalidInputError, match="top_p"):
        SamplingSpec(temperature=1.0, top_p=0.0)
    with pytest.raises(InvalidInputError, match="max_new_tokens"):
        GenerationRequest(prompt="x", max_new_tokens=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error(models):
    with pytest.raises(InvalidInputError, match="sees no CUDA GPU"):
        TorchEngine().load(LoadSpec(models["target"], device="cuda"))
