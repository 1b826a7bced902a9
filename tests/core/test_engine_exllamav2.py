"""The ExLlamaV2 engine's GPU-free parts: context and RoPE arithmetic, folder checks, error
wording, sampler settings, and the accounting of a replayed generator run.

ExLlamaV2 itself cannot run here (no CUDA). The one replay below feeds the job reader result
dicts shaped exactly as exllamav2 0.3.2's ``ExLlamaV2DynamicGenerator.iterate()`` documents
them; the engine's GPU path stays unverified until a GPU run (docs/engines.md).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import MODELS
from specdeck.core.engines.base import (
    DrafterKind,
    DrafterSpec,
    Engine,
    EngineUnavailableError,
    GenerationRequest,
    LoadSpec,
    OutOfMemoryError,
    SamplingSpec,
    StopReason,
)
from specdeck.core.engines.exllamav2 import (
    ExLlamaV2Engine,
    _JobReader,
    cache_class_name,
    check_model_folder,
    job_max_new_tokens,
    map_import_error,
    map_load_error,
    plan_context,
    q_size,
    reserve_bytes,
    sampler_kwargs,
)
from specdeck.core.errors import InvalidInputError
from specdeck.core.models import read_model

DATA = Path(__file__).resolve().parents[1] / "data"
REAL_IMPORT_FAILURE = (DATA / "exllamav2-0.3.2-import-on-cpu-torch.txt").read_text()


# context arithmetic (the rules themselves: test_exl2_facts.py) -------------------------------
def test_tinyllama_drafting_for_llama2_gets_its_rope_stretched():
    plan = plan_context(
        read_model(MODELS / "Llama-2-7b-hf"),
        read_model(MODELS / "TinyLlama-1.1B-Chat-v1.0"),
        LoadSpec(MODELS / "Llama-2-7b-hf"),
    )
    assert (plan.max_seq_len, plan.cache_tokens) == (4096, 4096)
    assert (plan.target_native, plan.draft_native) == (4096, 2048)
    assert plan.draft_rope_alpha == pytest.approx(2.62978)
    assert any("RoPE alpha 2.630" in note for note in plan.notes)


def test_long_context_models_default_to_4096_and_round_what_is_asked():
    target = read_model(MODELS / "Llama-3.1-8B")
    draft = read_model(MODELS / "Llama-3.2-1B")
    assert plan_context(target, draft, LoadSpec(target.path)).max_seq_len == 4096
    plan = plan_context(target, draft, LoadSpec(target.path, max_seq_len=5000))
    assert plan.max_seq_len == 5120
    assert plan.draft_rope_alpha == 1.0
    assert "rounded up to 5120" in plan.notes[0]
    explicit = plan_context(
        target, draft, LoadSpec(target.path, max_seq_len=5000, draft_rope_alpha=1.5)
    )
    assert explicit.draft_rope_alpha == 1.5


def test_asking_beyond_the_native_context_is_noted():
    target = read_model(MODELS / "Llama-2-7b-hf")
    plan = plan_context(target, None, LoadSpec(target.path, max_seq_len=8192))
    assert plan.max_seq_len == 8192
    assert any("exceeds" in note for note in plan.notes)


def test_cache_modes_reserve_and_lengths():
    assert cache_class_name("q4") == "ExLlamaV2Cache_Q4"
    assert cache_class_name("FP16") == "ExLlamaV2Cache"
    with pytest.raises(InvalidInputError, match="FP16, Q8, Q6 or Q4"):
        cache_class_name("FP8")
    assert reserve_bytes((96.0,)) == [96 * 1024**2]
    assert reserve_bytes((96.0, 0.5)) == [96 * 1024**2, 512 * 1024]
    # load_autosplit reads reserve_vram[gpu] for every GPU it reaches: one entry per device,
    # TabbyAPI's [96] meaning 96 MB on GPU 0 and none on the others.
    assert reserve_bytes((96.0,), devices=3) == [96 * 1024**2, 0, 0]
    assert reserve_bytes((), devices=2) == [96 * 1024**2, 0]
    assert job_max_new_tokens(256, 4) == 260
    assert job_max_new_tokens(256, 0) == 256
    assert q_size(4) == 8 and q_size(10) == 11


# folder checks -----------------------------------------------------------------------------
def _exl2_folder(root: Path, quant: dict | None, tokenizer: bool = True, weights: bool = True,
                 family: str = "TinyLlama-1.1B-Chat-v1.0"):
    import numpy as np
    from safetensors.numpy import save_file

    root.mkdir(parents=True)
    config = json.loads((MODELS / "TinyLlama-1.1B-Chat-v1.0" / "config.json").read_text())
    if quant is not None:
        config["quantization_config"] = quant
    (root / "config.json").write_text(json.dumps(config))
    if weights:
        save_file({"model.layers.0.self_attn.q_proj.q_weight": np.zeros((4, 4), np.int32)},
                  str(root / "output.safetensors"))
    if tokenizer:
        shutil.copy(MODELS / family / "tokenizer.json", root)
    return root


EXL2 = {"quant_method": "exl2", "version": "0.2.2", "bits": 4.0, "head_bits": 6}


def test_a_complete_exl2_folder_passes(tmp_path):
    info = check_model_folder(_exl2_folder(tmp_path / "m", EXL2), "model")
    assert info.is_exl2


def test_an_exl3_folder_is_not_exl2(tmp_path):
    folder = _exl2_folder(tmp_path / "m", {"quant_method": "exl3", "bits": 4.0})
    with pytest.raises(InvalidInputError, match="not an EXL2 model.*ExLlamaV3"):
        check_model_folder(folder, "model")


def test_missing_tokenizer_json_is_named(tmp_path):
    folder = _exl2_folder(tmp_path / "m", EXL2, tokenizer=False)
    with pytest.raises(InvalidInputError, match="no tokenizer.json"):
        check_model_folder(folder, "draft model")


def test_missing_weights_are_named(tmp_path):
    folder = _exl2_folder(tmp_path / "m", EXL2, weights=False)
    with pytest.raises(InvalidInputError, match=r"has no weights \(\*\.safetensors\)"):
        check_model_folder(folder, "model")


# errors ------------------------------------------------------------------------------------
def test_the_real_cpu_torch_import_failure_is_explained():
    error = map_import_error(OSError(REAL_IMPORT_FAILURE))
    assert isinstance(error, EngineUnavailableError)
    assert "no CUDA toolkit was found" in error.what
    assert "CUDA_HOME" in error.fix


@pytest.mark.parametrize(
    "exc, phrase",
    [
        (ModuleNotFoundError("No module named 'exllamav2'"), "not installed"),
        (ImportError("exllamav2_ext.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"),
         "does not match the installed torch"),
        (RuntimeError("Error building extension 'exllamav2_ext'"), "failed to build"),
    ],
)
def test_import_failures_are_worded_for_the_user(exc, phrase):
    error = map_import_error(exc)
    assert isinstance(error, EngineUnavailableError)
    assert phrase in error.what


def test_out_of_vram_during_load_suggests_a_smaller_cache():
    target = read_model(MODELS / "Llama-2-7b-hf")
    plan = plan_context(target, None, LoadSpec(target.path))
    error = map_load_error(RuntimeError("Insufficient VRAM for model and cache"), target.path, plan)
    assert isinstance(error, OutOfMemoryError)
    assert "4096-token cache" in error.what
    assert "Q4" in error.fix


@pytest.mark.parametrize(
    "exc, phrase",
    [
        (FileNotFoundError("No supported tokenizer found."), "no tokenizer.json"),
        (ValueError(" ## No .safetensors files found in /models/x"), "not a complete model"),
        (ValueError(" ## Could not find model.layers.0.mlp.* in model"), "cannot load"),
    ],
)
def test_load_failures_are_worded_for_the_user(exc, phrase):
    error = map_load_error(exc, Path("/models/x"), None)
    assert isinstance(error, InvalidInputError)
    assert phrase in str(error)


def test_unknown_failures_are_not_disguised():
    exc = RuntimeError("something unexpected")
    assert map_load_error(exc, Path("/m"), None) is exc


# sampler -----------------------------------------------------------------------------------
def test_greedy_and_sampled_settings_override_exllamav2s_defaults():
    assert sampler_kwargs(SamplingSpec()) == (True, {"token_repetition_penalty": 1.0})
    greedy, kwargs = sampler_kwargs(SamplingSpec(temperature=0.7, top_k=40, seed=1))
    assert not greedy
    assert kwargs == {
        "temperature": 0.7,
        "top_k": 40,
        "top_p": 0.0,
        "min_p": 0.0,
        "token_repetition_penalty": 1.0,
    }


# the engine on this machine ------------------------------------------------------------------
def test_engine_satisfies_the_protocol():
    assert isinstance(ExLlamaV2Engine(), Engine)


def test_loading_without_a_usable_exllamav2_is_a_clear_error(tmp_path):
    from specdeck.core.engines import availability

    folder = _exl2_folder(tmp_path / "m", EXL2)
    engine = ExLlamaV2Engine()
    with pytest.raises(EngineUnavailableError) as caught:
        engine.load(LoadSpec(folder, drafter=DrafterSpec(DrafterKind.NGRAM)))
    assert "ExLlamaV2" in caught.value.what or "exllamav2" in caught.value.what
    assert engine.loaded is None
    # The real import outcome is remembered, so listing engines can say why without importing.
    assert availability.recorded_exllamav2_import()[0] is False
    with pytest.raises(InvalidInputError, match="No model is loaded"):
        engine.generate(GenerationRequest(prompt="hi"))


def test_bad_cache_mode_is_refused_before_any_import(tmp_path):
    folder = _exl2_folder(tmp_path / "m", EXL2)
    with pytest.raises(InvalidInputError, match="Cache mode"):
        ExLlamaV2Engine().load(LoadSpec(folder, cache_mode="FP8"))


# a replayed drafting run ----------------------------------------------------------------------
def _streaming(job, token: int, text: str, **extra):
    torch = pytest.importorskip("torch")
    return {"job": job, "stage": "streaming", "eos": False, "serial": 0, "text": text,
            "token_ids": torch.tensor([[token]]), **extra}


def test_job_reader_accounts_a_drafting_run_like_the_generator():
    job = SimpleNamespace(new_tokens=0, accepted_draft_tokens=0, rejected_draft_tokens=0)
    events = []
    reader = _JobReader(job, num_draft_tokens=4, on_event=events.append)
    # iterate() 1: the job starts and its prompt is ingested: nothing streamed yet.
    reader.read([{"job": job, "stage": "started", "eos": False, "serial": 0},
                 {"job": job, "stage": "prefill", "eos": False, "serial": 0,
                  "curr_progress": 41, "max_progress": 41}], 0.05)
    # iterate() 2: 4 drafts, the first 2 match, the 3rd is replaced by the target's token.
    job.new_tokens, job.accepted_draft_tokens, job.rejected_draft_tokens = 3, 2, 2
    reader.read([_streaming(job, 450, "The"), _streaming(job, 4996, " quick"),
                 _streaming(job, 17354, " brown")], 0.08)
    # iterate() 3: all 4 drafts match, plus the target's own token.
    job.new_tokens, job.accepted_draft_tokens = 8, 6
    reader.read([_streaming(job, t, f" t{t}") for t in (1701, 29916, 432, 17204, 975)], 0.11)
    # iterate() 4: the target samples EOS first; the generator stops before comparing drafts.
    job.new_tokens = 9
    final = _streaming(job, 2, "", eos=True, eos_reason="stop_token", new_tokens=9,
                       eos_triggering_token_id=2, eos_triggering_token_str="</s>",
                       time_prefill=0.04, time_generate=0.09,
                       accepted_draft_tokens=6, rejected_draft_tokens=2)
    # The stop token is not streamed: it comes in "held", as the generator's emit() builds it.
    final["held"] = {"token_ids": final.pop("token_ids")}
    reader.read([final], 0.14)
    result = reader.result([1, 2, 3], GenerationRequest(prompt="x"),
                           DrafterSpec(DrafterKind.NGRAM), peak_vram=123, wall_s=0.2)
    s = result.stats
    assert (s.steps, s.draft_steps, s.drafted, s.accepted, s.rejected) == (3, 2, 8, 6, 2)
    assert s.new_tokens == 9 == s.steps + s.accepted
    assert s.tokens_per_second == pytest.approx(9 / 0.09)
    assert s.stop_reason is StopReason.EOS
    assert s.per_position_drafted == (2, 2, 2, 2)
    assert s.per_position_accepted == (2, 2, 1, 1)
    assert result.token_ids[-1] == 2 and len(result.token_ids) == s.new_tokens
    assert result.from_draft == (True, True, False, True, True, True, True, False, False)
    assert result.text == "The quick brown t1701 t29916 t432 t17204 t975"
    assert [e.step for e in events] == [1, 2, 3]
    assert events[0].drafted == 4 and events[0].accepted == 2


def test_job_reader_keeps_the_tokens_held_back_when_a_stop_token_ends_the_run():
    torch = pytest.importorskip("torch")
    job = SimpleNamespace(new_tokens=0, accepted_draft_tokens=0, rejected_draft_tokens=0)
    events = []
    reader = _JobReader(job, num_draft_tokens=0, on_event=events.append)
    job.new_tokens = 1
    reader.read([_streaming(job, 34, "Caf")], 0.05)
    # A byte token that starts "é": the generator holds it (no text, no ids streamed).
    job.new_tokens = 2
    reader.read([{"job": job, "stage": "streaming", "eos": False, "serial": 0}], 0.06)
    # The stop token comes next: the held byte, the stop token and their text come in "held".
    job.new_tokens = 3
    reader.read([{"job": job, "stage": "streaming", "eos": True, "serial": 0,
                  "eos_reason": "stop_token", "eos_triggering_token_id": 2, "new_tokens": 3,
                  "time_prefill": 0.01, "time_generate": 0.05,
                  "held": {"text": "\ufffd", "token_ids": torch.tensor([[195, 2]])}}], 0.07)
    result = reader.result([1], GenerationRequest(prompt="x"), DrafterSpec(DrafterKind.NONE),
                           peak_vram=0, wall_s=0.08)
    assert result.token_ids == (34, 195, 2) and len(result.token_ids) == result.stats.new_tokens
    assert result.stats.stop_reason is StopReason.EOS
    assert result.text == "Caf\ufffd" == "".join(e.text for e in events)  # the stream ends as the result
    assert events[-1].token_ids == (195, 2)


def test_a_failed_load_lets_go_of_the_tensors_its_frames_held():
    import gc
    import weakref

    from specdeck.core.engines.exllamav2 import release_failed_load

    class Tensor:  # stands for the half-built cache a failed load_autosplit leaves in its frame
        pass

    def load_autosplit():
        cache = Tensor()
        probe.append(weakref.ref(cache))
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def load():
        try:
            load_autosplit()
        except RuntimeError as exc:
            raise OutOfMemoryError("Not enough VRAM") from exc

    probe = []
    try:
        load()
    except OutOfMemoryError as error:
        gc.collect()
        assert probe[0]() is not None, "the traceback keeps the frame's tensors alive"
        release_failed_load(error)
        gc.collect()
        assert probe[0]() is None


# arm switching, against a recording stand-in for the exllamav2 module ---------------------------
class _RecordingExLlamaV2:
    """The slice of exllamav2 0.3.2's API the engine's load and set_drafter paths call, recording
    what was loaded. exllamav2 cannot import here (no CUDA); this checks our switching logic only."""

    def __init__(self):
        self.loaded: list[str] = []
        self.unloaded: list[str] = []
        self.generators: list[dict] = []
        self.warmups = 0
        self.reserves: list = []
        self.out_of_memory: set[str] = set()
        self.configs: list[SimpleNamespace] = []
        self.attn = SimpleNamespace(has_flash_attn_with_paged=False)
        outer = self

        class Config(SimpleNamespace):
            def __init__(self, path):
                super().__init__(model_dir=path, max_input_len=2048, no_flash_attn=False,
                                 generation_config={})
                outer.configs.append(self)

            def arch_compat_overrides(self, quiet=False):
                pass

        class Model:
            def __init__(self, config):
                self.config = config

            def load_autosplit(self, cache, reserve_vram=None, callback=None):
                name = Path(self.config.model_dir).name
                outer.reserves.append(reserve_vram)
                if name in outer.out_of_memory:
                    raise RuntimeError("CUDA out of memory. Tried to allocate 1.50 GiB")
                outer.loaded.append(name)

            def unload(self):
                outer.unloaded.append(Path(self.config.model_dir).name)

        class Generator:
            def __init__(self, **kwargs):
                outer.generators.append(kwargs)

            def warmup(self):
                outer.warmups += 1

        self.ExLlamaV2Config = Config
        self.ExLlamaV2 = Model
        self.ExLlamaV2Cache_Q4 = lambda model, max_seq_len, lazy: SimpleNamespace(model=model)
        self.ExLlamaV2Tokenizer = lambda config: SimpleNamespace(eos_token_id=2)
        self.ExLlamaV2DynamicGenerator = Generator


def test_an_ab_plan_switching_arms_loads_each_draft_once_and_warms_up_once(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from specdeck.core.engines import exllamav2 as module

    fake = _RecordingExLlamaV2()
    monkeypatch.setattr(module, "import_exllamav2", lambda: fake)
    target = _exl2_folder(tmp_path / "target", EXL2)
    draft = _exl2_folder(tmp_path / "draft", EXL2)
    other = _exl2_folder(tmp_path / "other", EXL2)
    engine = ExLlamaV2Engine()
    engine.load(LoadSpec(target, cache_mode="Q4", draft_cache_mode="Q4"))
    # The runner's interleaved order: A, draft k=4, n-gram, A, draft k=2 ...
    for spec in (DrafterSpec(DrafterKind.MODEL, draft, num_draft_tokens=4), DrafterSpec(DrafterKind.NGRAM),
                 DrafterSpec(DrafterKind.NONE), DrafterSpec(DrafterKind.MODEL, draft, num_draft_tokens=2)):
        loaded = engine.set_drafter(spec)
        assert loaded.drafter.kind is spec.kind
    assert fake.loaded == ["target", "draft"], "the parked draft was reloaded"
    assert fake.warmups == 2, "warm-up runs once per loaded model set"
    assert fake.generators[-1]["num_draft_tokens"] == 2
    assert fake.generators[-1]["draft_model"] is fake.generators[1]["draft_model"]
    assert "draft_model" not in fake.generators[2] and fake.generators[2]["use_ngram_draft"]
    assert "draft_model" not in fake.generators[3] and "use_ngram_draft" not in fake.generators[3]
    # Any arm's k fits the logits rows configured at load, whatever order the arms come in.
    assert all(c.max_output_len >= q_size(32) for c in fake.configs)

    engine.set_drafter(DrafterSpec(DrafterKind.MODEL, other))
    assert fake.loaded[-1] == "other" and fake.unloaded == ["draft"]
    engine.unload()
    assert sorted(fake.unloaded) == ["draft", "other", "target"]
    assert engine.loaded is None


def test_a_draft_that_does_not_fit_leaves_the_target_loaded_and_usable(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from specdeck.core.engines import exllamav2 as module

    fake = _RecordingExLlamaV2()
    monkeypatch.setattr(module, "import_exllamav2", lambda: fake)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # two GPUs, for the reserve
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA GeForce RTX 4090")
    target = _exl2_folder(tmp_path / "target", EXL2)
    big = _exl2_folder(tmp_path / "big-draft", EXL2)
    engine = ExLlamaV2Engine()
    engine.load(LoadSpec(target, cache_mode="Q4", draft_cache_mode="Q4"))
    assert fake.reserves[0] == [96 * 1024**2, 0]  # one reserve per GPU: autosplit reads each
    fake.out_of_memory.add("big-draft")
    with pytest.raises(OutOfMemoryError, match="target stays loaded without a draft"):
        engine.set_drafter(DrafterSpec(DrafterKind.MODEL, big, num_draft_tokens=4))
    assert fake.unloaded == ["big-draft"]  # the half-loaded draft was freed
    # The engine is not half-switched: the target runs on its own, labelled so.
    assert engine.loaded is not None and engine.loaded.drafter.kind is DrafterKind.NONE
    assert engine._generator is not None and "draft_model" not in fake.generators[-1]
    fake.out_of_memory.clear()
    engine.set_drafter(DrafterSpec(DrafterKind.MODEL, big, num_draft_tokens=4))
    assert fake.loaded == ["target", "big-draft"]
    engine.unload()


def test_a_draft_with_another_tokenizer_is_refused_by_the_compatibility_check(tmp_path, monkeypatch):
    """The same check as `specdeck check` (core.compat), before any draft weight loads."""
    pytest.importorskip("torch")
    from specdeck.core.engines import exllamav2 as module

    fake = _RecordingExLlamaV2()
    monkeypatch.setattr(module, "import_exllamav2", lambda: fake)
    target = _exl2_folder(tmp_path / "target", EXL2)
    mistral = _exl2_folder(tmp_path / "mistral-draft", EXL2, family="Mistral-7B-v0.1")
    engine = ExLlamaV2Engine()
    engine.load(LoadSpec(target, cache_mode="Q4", draft_cache_mode="Q4"))
    with pytest.raises(InvalidInputError, match=r"Draft mistral-draft, target target: This draft "
                       r"cannot speculate for this target \(Token text, id by id\)"):
        engine.set_drafter(DrafterSpec(DrafterKind.MODEL, mistral, num_draft_tokens=4))
    assert fake.loaded == ["target"]  # never loaded
    assert engine.loaded.drafter.kind is DrafterKind.NONE and engine._generator is not None
    engine.unload()


def test_a_draft_that_does_not_fit_at_load_frees_everything(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from specdeck.core.engines import exllamav2 as module

    fake = _RecordingExLlamaV2()
    fake.out_of_memory.add("draft")
    monkeypatch.setattr(module, "import_exllamav2", lambda: fake)
    target = _exl2_folder(tmp_path / "target", EXL2)
    draft = _exl2_folder(tmp_path / "draft", EXL2)
    engine = ExLlamaV2Engine()
    with pytest.raises(OutOfMemoryError, match="everything was freed again"):
        engine.load(LoadSpec(target, cache_mode="Q4", draft_cache_mode="Q4",
                             drafter=DrafterSpec(DrafterKind.MODEL, draft)))
    assert sorted(fake.unloaded) == ["draft", "target"] and engine.loaded is None


def test_a_gpu_split_too_small_is_an_out_of_memory_message():
    """exllamav2 0.3.2 model.py:229 asserts when a manual gpu_split runs out before the last
    module (autosplit raises out-of-memory instead): the same kind of answer for both."""
    exc = AssertionError("Insufficient space in device allocation")
    error = map_load_error(exc, Path("/models/Llama-3.1-70B-exl2"), None)
    assert isinstance(error, OutOfMemoryError)
    assert "its gpu_split ran out" in error.what and "gpu_split" in error.fix
    kept = map_load_error(exc, Path("/models/draft"), None, kept="target")
    assert "target stays loaded without a draft" in kept.what
    assert map_load_error(AssertionError("something else"), Path("/m"), None).__class__ \
        is AssertionError  # other assertions are not disguised


def test_an_ngram_drafter_that_would_never_look_anything_up_is_refused(tmp_path, monkeypatch):
    """exllamav2 0.3.2 generator/dynamic.py:1039-1044: with max_ngram 1 the lookup loop over
    range(max_ngram - 1) never runs, and every draft is the last token repeated."""
    pytest.importorskip("torch")
    from specdeck.core.engines import exllamav2 as module

    fake = _RecordingExLlamaV2()
    monkeypatch.setattr(module, "import_exllamav2", lambda: fake)
    engine = ExLlamaV2Engine()
    engine.load(LoadSpec(_exl2_folder(tmp_path / "target", EXL2), cache_mode="Q4",
                         draft_cache_mode="Q4"))
    with pytest.raises(InvalidInputError, match="ngram_max of 2 or more"):
        engine.set_drafter(DrafterSpec(DrafterKind.NGRAM, ngram_min=1, ngram_max=1))
    assert len(fake.generators) == 1  # refused before a generator was built
    engine.set_drafter(DrafterSpec(DrafterKind.NGRAM, ngram_min=2, ngram_max=2))
    assert fake.generators[-1]["max_ngram"] == 2
    engine.unload()


def test_draft_traffic_counts_the_extra_preprocess_forward_per_step():
    """exllamav2 0.3.2 dynamic.py 1108-1133: k draft forwards, then one preprocess-only
    forward per draft step. 40 steps drafting 4 each read the draft's weights 200 times."""
    from specdeck.core.engines.base import weights_read
    from specdeck.core.engines.exllamav2 import draft_forwards

    assert draft_forwards(drafted=160, draft_steps=40) == 200
    assert weights_read(41, draft_forwards(160, 40), 10, 1) == 41 * 10 + 200


def _standin_engine(tmp_path, monkeypatch, script):
    torch = pytest.importorskip("torch")
    from exllamav2_standin import StandInExLlamaV2
    from specdeck.core.engines import exllamav2 as module

    fake = StandInExLlamaV2(script)
    monkeypatch.setattr(module, "import_exllamav2", lambda: fake)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA GeForce RTX 4090")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (8, 9))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: fake.calls.append("empty_cache"))
    engine = ExLlamaV2Engine()
    engine.load(LoadSpec(_exl2_folder(tmp_path / "target", EXL2), cache_mode="Q4",
                         draft_cache_mode="Q4"))
    return engine, fake


def test_generate_runs_whole_through_the_enforcing_standin(tmp_path, monkeypatch):
    """load -> set_drafter -> generate against a stand-in that asserts what exllamav2 0.3.2's
    generator asserts: the first token arrives in the same iterate() as the prefill, a step
    accepts 2 of 4 drafts, and EOS ends a step before its drafts are all judged
    (accepted + rejected < k). Each measured job starts from an empty page table (item 3),
    and the autosplit load gives PyTorch's cached reserve back (item 2)."""
    from exllamav2_standin import Step

    script = [Step((11,), with_prefill=True), Step((12, 13, 14), accepted=2, rejected=2),
              Step((15, 2), accepted=1, eos=True)]
    engine, fake = _standin_engine(tmp_path, monkeypatch, script)
    assert fake.calls[fake.calls.index("load_autosplit target") + 1] == "empty_cache"
    engine.set_drafter(DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=4, adaptive=False))
    assert fake.generators[-1]["max_q_size"] == q_size(4) and fake.generators[-1]["paged"]
    result = engine.generate(GenerationRequest(prompt_ids=(1, 5, 6, 7), max_new_tokens=32))
    s = result.stats
    assert fake.calls[-2:] == ["reset_page_table", "enqueue"]
    assert result.token_ids == (11, 12, 13, 14, 15, 2)
    assert (s.steps, s.draft_steps, s.drafted, s.accepted) == (3, 2, 5, 3)
    assert s.new_tokens == 6 and s.stop_reason is StopReason.EOS
    assert s.time_to_first_token_s is not None  # from the iterate() that held the prefill
    assert result.from_draft == (False, True, True, False, True, False)
    # A second job of the same prompt starts from an empty page table again.
    engine.generate(GenerationRequest(prompt_ids=(1, 5, 6, 7), max_new_tokens=32))
    assert fake.calls.count("reset_page_table") == 2
    engine.unload()


def test_greedy_runs_carry_each_tokens_logit_gap_so_a_float_tie_is_told_from_a_bug(
        tmp_path, monkeypatch):
    """The first H200 run found drafted runs parting from the baseline at token 1-2 and no
    way to say whether the target's top two logits were tied there. Greedy jobs now ask
    exllamav2 for each token's logits (return_logits) and the result keeps the top-1 minus
    top-2 gap per token, the held stop token's too; the losslessness check then tells a tie
    (gap ~0) from a real divergence. A sampled run asks for none."""
    from exllamav2_standin import Step
    from specdeck.core.engines.base import SamplingSpec
    from specdeck.core.engines.lossless import OutputMatch, compare_greedy

    script = [Step((11,), with_prefill=True, gaps=(2.5,)),
              Step((12, 13, 14), accepted=2, rejected=2, gaps=(0.0, 1.5, 0.75)),
              Step((15, 2), accepted=1, eos=True, gaps=(3.0, 4.0))]
    engine, fake = _standin_engine(tmp_path, monkeypatch, script)
    engine.set_drafter(DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=4, adaptive=False))
    drafted = engine.generate(GenerationRequest(prompt_ids=(1, 5, 6, 7), max_new_tokens=32))
    assert drafted.top2_gaps == (2.5, 0.0, 1.5, 0.75, 3.0, 4.0)
    reference = replace(drafted, token_ids=(11, 99, 13, 14, 15, 2), top2_gaps=())
    assert compare_greedy(reference, drafted).verdict is OutputMatch.TIE  # gap 0 at token 1
    bug = replace(drafted, token_ids=(11, 12, 13, 98, 15, 2))
    verdict = compare_greedy(replace(drafted, top2_gaps=()), bug)
    assert verdict.verdict is OutputMatch.DIVERGED and verdict.gap == 0.75
    sampled = engine.generate(GenerationRequest(
        prompt_ids=(1, 5, 6, 7), max_new_tokens=32,
        sampling=SamplingSpec(temperature=0.7, top_k=40, top_p=0.9, seed=1)))
    assert sampled.top2_gaps == ()  # nothing asked, nothing made up
    engine.unload()


def test_the_standin_refuses_what_exllamav2_refuses(tmp_path, monkeypatch):
    """The rules the stand-in enforces are real: a paged generator with flash-attn off
    (dynamic.py 354-357) and k above max_q_size (338-340) fail as exllamav2 would."""
    from exllamav2_standin import StandInExLlamaV2

    fake = StandInExLlamaV2([])
    model = fake.ExLlamaV2(fake.ExLlamaV2Config(str(tmp_path)))
    cache = fake.ExLlamaV2Cache(model, 2048)
    with pytest.raises(AssertionError, match="num_draft_tokens cannot be larger"):
        fake.ExLlamaV2DynamicGenerator(model, cache, None, max_q_size=4, use_ngram_draft=True,
                                       num_draft_tokens=8)
    model.config.no_flash_attn = True
    with pytest.raises(AssertionError, match="Paged mode requires flash-attn"):
        fake.ExLlamaV2DynamicGenerator(model, cache, None, paged=True)
    with pytest.raises(AssertionError, match="multiple of 256"):
        fake.ExLlamaV2DynamicGenerator(model, fake.ExLlamaV2Cache(model, 1000), None, paged=False)


# exllamav2 0.2.9-0.3.2 runs torch SDPA unmasked on the unpaged path -------------------------------
def _attention_class():
    """Shaped as exllamav2 0.3.2's ExLlamaV2Attention where the fix reads it (its
    ``_attn_torch`` signature, attn.py 869); tests/core/test_exl2_attention.py runs the real one."""
    class ExLlamaV2Attention:
        def _attn_torch(self, batch_size, q_len, q_states, k_states, v_states, attn_params, cfg,
                        causal=True):
            raise AssertionError("not run here")
    return ExLlamaV2Attention


@pytest.mark.parametrize("version, attn, paged, masked", [
    ("0.3.2", {"has_lower_right_sdpa": True}, False, True),
    ("0.2.9", {"has_lower_right_sdpa": True}, False, True),
    ("0.2.8", {"has_lower_right_sdpa": True}, False, False),  # before commit 2e630ae
    ("0.3.2", {"has_lower_right_sdpa": False}, False, False),  # torch < 2.4: the matmul branch
    ("0.3.2", {"has_lower_right_sdpa": True, "has_xformers": True}, False, False),
    ("0.3.2", {"has_lower_right_sdpa": True}, True, False),  # paged: flash-attn's causal kernels
])
def test_unpaged_attention_gets_its_causal_mask_back_where_sdpa_runs_unmasked(
        tmp_path, monkeypatch, version, attn, paged, masked):
    pytest.importorskip("torch")
    import torch
    from specdeck.core.engines import exl2_attention
    from specdeck.core.engines import exllamav2 as module

    fake = _RecordingExLlamaV2()
    fake.version = version
    fake.attn = SimpleNamespace(has_flash_attn_with_paged=paged,
                                ExLlamaV2Attention=_attention_class(), **attn)
    monkeypatch.setattr(module, "import_exllamav2", lambda: fake)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    monkeypatch.setattr(torch.version, "hip", None)
    target = _exl2_folder(tmp_path / "target", EXL2)
    draft = _exl2_folder(tmp_path / "draft", EXL2)
    engine = ExLlamaV2Engine()
    loaded = engine.load(LoadSpec(target, cache_mode="Q4", draft_cache_mode="Q4",
                                  drafter=DrafterSpec(DrafterKind.MODEL, draft, num_draft_tokens=4)))

    assert exl2_attention.is_restored(fake.attn.ExLlamaV2Attention) is masked
    assert [getattr(c, "no_sdpa", False) for c in fake.configs] == [False, False], \
        "SDPA stays on for the target and the draft alike"
    said = [n for n in loaded.notes if "no causal mask" in n]
    assert bool(said) is masked
    if masked:
        assert version in said[0] and "restores the causal" in said[0]


def test_a_later_draft_load_is_masked_too(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from specdeck.core.engines import exl2_attention
    from specdeck.core.engines import exllamav2 as module

    fake = _RecordingExLlamaV2()
    fake.version = "0.3.2"
    fake.attn = SimpleNamespace(has_flash_attn_with_paged=False, has_lower_right_sdpa=True,
                                ExLlamaV2Attention=_attention_class())
    monkeypatch.setattr(module, "import_exllamav2", lambda: fake)
    engine = ExLlamaV2Engine()
    engine.load(LoadSpec(_exl2_folder(tmp_path / "target", EXL2), cache_mode="Q4", draft_cache_mode="Q4"))
    assert exl2_attention.is_restored(fake.attn.ExLlamaV2Attention)
    fake.attn.ExLlamaV2Attention = _attention_class()  # as if the module were reloaded
    engine.set_drafter(DrafterSpec(DrafterKind.MODEL, _exl2_folder(tmp_path / "draft", EXL2)))
    assert exl2_attention.is_restored(fake.attn.ExLlamaV2Attention)
    assert [getattr(c, "no_sdpa", False) for c in fake.configs] == [False, False]


def test_a_prompt_begins_with_one_bos_whether_or_not_its_template_wrote_it(tmp_path,
                                                                          monkeypatch):
    """The ExLlamaV2 engine adds BOS as the PyTorch engine does (core.engines.common's one
    rule, TabbyAPI's): once, when the model's rule adds it and the chat template did not
    already write it."""
    from specdeck.core.engines import exllamav2 as module

    engine, _ = _standin_engine(tmp_path, monkeypatch, [])
    for written in ("<s>[INST] {} [/INST]", "[INST] {} [/INST]"):
        monkeypatch.setattr(module, "_render_chat_template",
                            lambda path, text, written=written: written.format(text))
        ids = engine.tokenize("hello", apply_chat_template=True)
        assert ids[:1] == [1] and ids[1] != 1, written
    assert engine.tokenize("hello")[:1] == [1] and engine.tokenize("hello")[1] != 1
    engine.unload()
