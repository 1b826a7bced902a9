"""The ExLlamaV2 engine: EXL2 models on NVIDIA GPUs, through ExLlamaV2's dynamic generator.

Written against exllamav2 v0.3.2 (the last release): ``ExLlamaV2DynamicGenerator`` with
``draft_model`` / ``draft_cache`` / ``num_draft_tokens`` or ``use_ngram_draft``, one
``ExLlamaV2DynamicJob`` per generation, read through ``generator.iterate()``.

What it does the way TabbyAPI's exl2 backend does (and why):
- the cache length is a multiple of 256 (the generator's page size asserts it);
- the draft's ``max_seq_len`` equals the target's, and when the draft's native context is
  shorter its RoPE is stretched with the NTK alpha (docs/engines.md has the formula);
- autosplit with a reserve per GPU, or an explicit ``gpu_split`` in GB;
- ``paged=False`` (and flash-attn off) when flash-attn >= 2.5.7 is missing or a GPU is
  older than Ampere: the unpaged mode runs one job at a time, which is all SpecDeck needs;
  there, the causal mask restored, because exllamav2 0.2.9-0.3.2 runs torch SDPA with no
  causal mask (:mod:`specdeck.core.engines.exl2_attention`);
- jobs stop on EOS only through ``stop_conditions``; with drafting on a job stops at
  ``max_new_tokens - num_draft_tokens``, so SpecDeck asks for k more and the arms compare
  equal lengths; tokens/s = new_tokens / time_generate; acceptance from the job's
  accepted_draft_tokens / rejected_draft_tokens.

``import exllamav2`` fails on any machine without CUDA (it builds its extension on import),
so it happens inside :meth:`ExLlamaV2Engine.load` only. Everything above the engine class is
plain arithmetic and file reading, tested without a GPU. The engine itself is unverified
until a GPU run (docs/engines.md).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specdeck.core.engines import common
from specdeck.core.engines.base import (
    MAX_DRAFT_TOKENS,
    NO_DRAFT,
    DrafterKind,
    DrafterSpec,
    EngineUnavailableError,
    EventCallback,
    GenerationEvent,
    GenerationRequest,
    GenerationResult,
    GenerationStats,
    LoadedModel,
    LoadProgress,
    LoadSpec,
    ProgressCallback,
    SamplingSpec,
    StopReason,
    weights_read,
)
from specdeck.core.engines.exl2_attention import mask_unpaged_attention
from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.exl2_facts import (
    CACHE_CLASSES,
    CACHE_STEP,
    DEFAULT_AUTOSPLIT_RESERVE_MB,
    DEFAULT_CACHE_MODE,
    DEFAULT_MAX_SEQ_LEN,
    check_cache_mode,
    ntk_rope_alpha,
    round_up_to_cache_step,
)
from specdeck.core.models import ModelInfo
from specdeck.core.units import MiB

log = logging.getLogger(__name__)

ENGINE_NAME = "exllamav2"
LOADABLE_QUANT = ("exl2", "gptq", "none")
"""What ExLlamaV2 0.3.2 loads: EXL2, GPTQ, and unquantized FP16/BF16 safetensors."""
MIN_Q_SIZE = 8
"""The generator's default max_q_size (tokens per sequence per forward)."""
MIN_OUTPUT_LEN = 16
"""TabbyAPI's max_output_len: logits for at most this many positions per forward."""
FLASH_ATTN_MIN_CAPABILITY = 8


# Context arithmetic ----------------------------------------------------------------------
@dataclass(frozen=True)
class ContextPlan:
    """Sequence and cache lengths for a target (and draft) as ExLlamaV2 will use them."""

    max_seq_len: int
    """The target's (and the draft's) max_seq_len: a multiple of 256."""
    cache_tokens: int
    """Cache length of the target and the draft cache (they must be equal)."""
    target_native: int
    draft_native: int | None = None
    draft_rope_alpha: float = 1.0
    notes: tuple[str, ...] = ()


def plan_context(
    target: ModelInfo, draft: ModelInfo | None, spec: LoadSpec
) -> ContextPlan:
    native = target.context_length
    # With no context given, TabbyAPI's default: a 128k-context model's full cache would not
    # fit most GPUs. Cache lengths are whole pages of the dynamic generator.
    wanted = spec.max_seq_len or min(native, DEFAULT_MAX_SEQ_LEN)
    max_seq_len = round_up_to_cache_step(wanted)
    notes = []
    if max_seq_len != wanted:
        notes.append(f"context {wanted} rounded up to {max_seq_len} (a multiple of {CACHE_STEP})")
    if max_seq_len > native:
        notes.append(
            f"context {max_seq_len} exceeds {target.name}'s native {native}: "
            "quality may drop without RoPE scaling"
        )
    if draft is None:
        return ContextPlan(max_seq_len, max_seq_len, native, notes=tuple(notes))
    draft_native = draft.context_length
    if spec.draft_rope_alpha is not None:
        alpha = float(spec.draft_rope_alpha)
    else:
        alpha = ntk_rope_alpha(max_seq_len / draft_native) if draft_native > 0 else 1.0
    if alpha != 1.0:
        notes.append(
            f"draft native context {draft_native} < {max_seq_len}: draft RoPE alpha {alpha:.3f}"
        )
    return ContextPlan(
        max_seq_len, max_seq_len, native, draft_native, alpha, tuple(notes)
    )


def cache_class_name(mode: str) -> str:
    """The exllamav2 cache class for a TabbyAPI cache mode (blank: FP16)."""
    return CACHE_CLASSES[check_cache_mode(mode or DEFAULT_CACHE_MODE)]


def reserve_bytes(reserve_mb: tuple[float, ...], devices: int = 1) -> list[int]:
    """Autosplit reserve per GPU, MB -> bytes, one entry per CUDA device.

    load_autosplit reads ``reserve_vram[device]`` for every GPU it moves on to, so a list
    shorter than the device count fails with IndexError on the second GPU. TabbyAPI's
    autosplit_reserve names GPU 0 first ([96] = 96 MB on GPU 0): the rest get 0.
    """
    values = [round(mb * MiB) for mb in reserve_mb or DEFAULT_AUTOSPLIT_RESERVE_MB]
    return values + [0] * (devices - len(values))


def release_failed_load(exc: BaseException) -> None:
    """Let a failed load's tensors go. The exception's traceback keeps the finished frames of
    the load alive, and with them the half-built cache and exllamav2's reserve tensors
    (model.py says so where load_autosplit fails); clear those frames' locals, along the
    whole chain of causes, so that gc and empty_cache can return the memory."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)  # skips frames still running
        current = current.__cause__ or current.__context__


def job_max_new_tokens(max_new_tokens: int, num_draft_tokens: int) -> int:
    """ExLlamaV2 ends a drafting job at max_new_tokens - num_draft_tokens: ask for more."""
    return max_new_tokens + num_draft_tokens


def q_size(num_draft_tokens: int) -> int:
    """Tokens per verify forward (the last token + the drafts) must fit max_q_size."""
    return max(MIN_Q_SIZE, num_draft_tokens + 1)


def check_model_folder(path: Path, role: str) -> ModelInfo:
    """Fail before touching the GPU on folders ExLlamaV2 cannot load."""
    return common.check_model_folder(
        path, role, loads=LOADABLE_QUANT,
        wrong_quant="The {role} {name} is {label}, not an EXL2 model.",
        wrong_quant_fix="ExLlamaV2 loads EXL2 (and GPTQ / FP16) folders; EXL3 needs ExLlamaV3.",
        tokenizer="tokenizer.json",
        tokenizer_note="ExLlamaV2 0.3.2 reads only tokenizer.json (SentencePiece "
                       "tokenizer.model is no longer supported).")


# Errors ----------------------------------------------------------------------------------
INSTALL_HINT = "pip install 'specdeck[exllamav2]' (with a CUDA build of torch; see docs/engines.md)"


def map_import_error(exc: BaseException) -> SpecDeckError:
    """``import exllamav2`` failures, worded for the user."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ModuleNotFoundError) and "exllamav2" in str(exc):
        return EngineUnavailableError("ExLlamaV2 is not installed.", INSTALL_HINT)
    if "CUDA_HOME" in text or "nvcc" in text:
        return EngineUnavailableError(
            "ExLlamaV2 builds its CUDA extension on first import, and no CUDA toolkit was "
            f"found ({_first_line(text)}).",
            "Install the CUDA toolkit matching torch.version.cuda and set CUDA_HOME, or "
            "install a prebuilt exllamav2 wheel for your torch/CUDA/Python.",
        )
    if "undefined symbol" in text:
        return EngineUnavailableError(
            "ExLlamaV2's prebuilt extension does not match the installed torch "
            f"({_first_line(text)}).",
            "Install the exllamav2 wheel built for your exact torch version "
            "(docs/engines.md lists them).",
        )
    if "Error building extension" in text or "ninja" in text.lower():
        return EngineUnavailableError(
            f"ExLlamaV2's CUDA extension failed to build ({_first_line(text)}).",
            "Check that nvcc matches torch's CUDA version and a C++ compiler is installed, "
            "or install a prebuilt exllamav2 wheel.",
        )
    if "CUDA" in text or "cuda" in text:
        return EngineUnavailableError(
            f"ExLlamaV2 cannot start: {_first_line(text)}.",
            "ExLlamaV2 needs an NVIDIA GPU and a CUDA build of torch.",
        )
    return EngineUnavailableError(f"Importing exllamav2 failed: {_first_line(text)}.", INSTALL_HINT)


def is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return (
        type(exc).__name__ == "OutOfMemoryError"
        or "CUDA out of memory" in text
        or "Insufficient VRAM" in text
    )


def draft_forwards(drafted: int, draft_steps: int) -> int:
    """Forward passes of the draft model in a run: exllamav2 0.3.2's draft loop
    (generator/dynamic.py, iterate_draftmodel_gen, lines 1108-1133) runs one forward per
    drafted token and then one more, preprocess-only, that writes the last drafted token's
    keys and values: k + 1 per draft step. (That last pass skips the output head; counting it
    whole overstates a draft's traffic by its head's share of one forward.)"""
    return drafted + draft_steps


NGRAM_MIN_MAX = 2
"""The smallest max_ngram whose lookup runs (see set_drafter)."""
SPLIT_TOO_SMALL = "Insufficient space in device allocation"
"""exllamav2 0.3.2 model.py line 229: a manual gpu_split whose GB run out before the last
module is placed fails this assertion (autosplit raises out-of-memory instead)."""


def map_load_error(exc: BaseException, path: Path, plan: ContextPlan | None,
                   kept: str | None = None) -> BaseException:
    """Load failures, worded for the user; unknown exceptions are returned unchanged.

    ``kept`` names the model that stays loaded (a draft failed beside its target)."""
    if isinstance(exc, SpecDeckError):
        return exc
    if isinstance(exc, AssertionError) and SPLIT_TOO_SMALL in str(exc):
        return common.out_of_memory(
            f"loading {path.name}: its gpu_split ran out (the GB given per GPU ended before "
            "the last layer)",
            "Raise gpu_split's numbers (in GB, one per GPU), or leave gpu_split empty to "
            "autosplit.", common.freed(kept))
    if is_out_of_memory(exc):
        cache = f" with a {plan.cache_tokens}-token cache" if plan else ""
        return common.out_of_memory(
            f"loading {path.name}{cache}",
            "Use a shorter context (max_seq_len), a Q4/Q6/Q8 cache, a lower-bpw model, "
            "or spread it over more GPUs with gpu_split.", common.freed(kept))
    text = str(exc)
    if "No supported tokenizer" in text or "tokenizer.json" in text:
        return InvalidInputError(
            f"{path.name} has no tokenizer.json, which ExLlamaV2 0.3.2 needs.",
            "Copy tokenizer.json from the original model repository.",
        )
    if "No .safetensors files" in text or "Can't find" in text:
        return InvalidInputError(
            f"{path} is not a complete model folder: {text.strip(' #')}.",
            "Pick the folder that holds config.json and the *.safetensors files.",
        )
    if "Could not find" in text or "architecture" in text.lower():
        return InvalidInputError(
            f"ExLlamaV2 cannot load {path.name}: {text.strip(' #')}.",
            "ExLlamaV2 0.3.2 supports the architectures listed in its README.",
        )
    return exc


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else text
    return line[:300]


def sampler_kwargs(spec: SamplingSpec) -> tuple[bool, dict[str, Any]]:
    """(greedy, keyword arguments) for ExLlamaV2Sampler.Settings. Its defaults (temperature
    0.8, top-k 50, top-p 0.8, repetition penalty 1.025) are all overridden: an A/B run must
    sample exactly as asked. Greedy uses ``Settings.greedy(**kwargs)``."""
    if spec.greedy:
        return True, {"token_repetition_penalty": spec.repetition_penalty}
    return False, {
        "temperature": spec.temperature,
        "top_k": spec.top_k,
        "top_p": spec.top_p if spec.top_p < 1.0 else 0.0,  # 0 disables top-p in ExLlamaV2
        "min_p": 0.0,
        "token_repetition_penalty": spec.repetition_penalty,
    }


def sampler_settings(spec: SamplingSpec, sampler_cls: Any) -> Any:
    greedy, kwargs = sampler_kwargs(spec)
    return sampler_cls.Settings.greedy(**kwargs) if greedy else sampler_cls.Settings(**kwargs)


# The engine ------------------------------------------------------------------------------
class ExLlamaV2Engine:
    """See the module docstring. All calls must come from one thread."""

    name = ENGINE_NAME

    def __init__(self) -> None:
        self._x: Any = None  # the imported exllamav2 names (a namespace)
        self._spec: LoadSpec | None = None
        self._plan: ContextPlan | None = None
        self._target_info: ModelInfo | None = None
        self._model: Any = None
        self._cache: Any = None
        self._tokenizer: Any = None
        self._draft_model: Any = None
        self._draft_cache: Any = None
        self._draft_path: Path | None = None
        self._draft_notes: tuple[str, ...] = ()
        """core.compat's warnings about the loaded draft."""
        self._target_bytes: int | None = None
        self._draft_bytes: int | None = None
        """Weights on the GPU, from the EXL2 files (the embedding stays in system RAM)."""
        self._warm = False
        """The generator ran its warm-up job for the models loaded now."""
        self._generator: Any = None
        self._drafter: DrafterSpec = NO_DRAFT
        self._paged = True
        self._notes: tuple[str, ...] = ()
        self._loaded: LoadedModel | None = None

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    def load(
        self,
        spec: LoadSpec,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LoadedModel:
        self.unload()
        path = Path(spec.model_path)
        target = check_model_folder(path, "model")
        cache_class_name(spec.cache_mode)
        cache_class_name(spec.draft_cache_mode)
        self._x = import_exllamav2()
        self._spec = spec
        self._target_info = target
        self._target_bytes = _gpu_weight_bytes(target)
        self._plan = plan_context(target, None, spec)
        try:
            self._load_target(path, common.LoadStages(progress, cancel))
            return self.set_drafter(spec.drafter, progress, cancel)
        except BaseException as exc:
            mapped = map_load_error(exc, path, self._plan)
            release_failed_load(exc)
            self.unload()
            if mapped is exc:
                raise
            raise mapped from exc

    def _load_target(self, path: Path, progress: common.LoadStages) -> None:
        x = self._x
        config = x.ExLlamaV2Config(str(path))
        config.arch_compat_overrides(quiet=True)
        self._paged = paged_attention_usable(x, config)
        notes = list(self._plan.notes)
        if not self._paged:
            config.no_flash_attn = True
            notes.append("paged=False: flash-attn >= 2.5.7 missing or a GPU older than Ampere")
        masked = mask_unpaged_attention(x, config, self._paged)
        if masked:
            notes.append(masked)
        self._configure(config, self._plan.max_seq_len, 1.0)
        self._model = x.ExLlamaV2(config)
        self._cache = self._load_with_cache(
            self._model, self._spec.cache_mode, progress.span("Loading target weights", 0.0, 0.7)
        )
        self._tokenizer = x.ExLlamaV2Tokenizer(config)
        self._notes = tuple(notes)

    def _configure(self, config: Any, max_seq_len: int, alpha: float) -> None:
        config.max_seq_len = max_seq_len
        config.max_input_len = min(config.max_input_len, max_seq_len)
        config.max_attention_size = config.max_input_len**2
        # Logits rows per forward: room for the largest k any A/B arm may switch to later
        # (33 rows x vocab x 4 bytes, ~17 MB at a 128k vocabulary).
        config.max_output_len = max(MIN_OUTPUT_LEN, q_size(MAX_DRAFT_TOKENS))
        config.scale_alpha_value = alpha

    def _load_with_cache(self, model: Any, mode: str, callback: Any) -> Any:
        cache_cls = getattr(self._x, cache_class_name(mode))
        tokens = self._plan.cache_tokens
        if self._spec.gpu_split:
            model.load(list(self._spec.gpu_split), callback=callback)
            return cache_cls(model, max_seq_len=tokens, lazy=False)
        import torch

        cache = cache_cls(model, max_seq_len=tokens, lazy=True)
        reserve = reserve_bytes(self._spec.autosplit_reserve_mb, torch.cuda.device_count())
        model.load_autosplit(cache, reserve_vram=reserve, callback=callback)
        # exllamav2 0.3.2 (model.py 538-603 and 671-674) calls empty_cache while its 256 MB
        # minimum_reserve_tensor is still referenced; that block is freed only when the
        # function returns, into PyTorch's cache, where it reads as used VRAM. Give it back.
        torch.cuda.empty_cache()
        return cache

    def set_drafter(
        self,
        drafter: DrafterSpec,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LoadedModel:
        if self._model is None:
            raise InvalidInputError("No model is loaded.", "Load a target model first.")
        self._generator = None
        notes = list(self._notes)
        warm = self._warm
        if drafter.kind is DrafterKind.MODEL:
            path = Path(drafter.model_path)
            # An A/B plan alternates arms per prompt: the same draft stays loaded (parked
            # while the no-draft and n-gram arms run; its VRAM is in the plan either way).
            if self._draft_model is None or self._draft_path != path.resolve():
                self._free_draft()
                warm = False
                # After a load the target survives a failed draft; inside load() it does not.
                kept = self._target_info.path.name if self._loaded is not None else None
                try:
                    info = check_model_folder(path, "draft model")
                    self._plan = plan_context(self._target_info, info, self._spec)
                    self._draft_notes = common.require_compatible_draft(
                        self._target_info.path, path, self._plan.max_seq_len)
                    self._load_draft(path, common.LoadStages(progress, cancel, kept=kept))
                except BaseException as exc:
                    plan = self._plan
                    self._fall_back_to_no_draft(exc)
                    mapped = map_load_error(exc, path, plan, kept=kept)
                    if mapped is exc:
                        raise
                    raise mapped from exc
                self._draft_path = path.resolve()
                self._draft_bytes = _gpu_weight_bytes(info)
            notes.extend(n for n in (*self._plan.notes, *self._draft_notes) if n not in notes)
        if drafter.kind is DrafterKind.NGRAM and drafter.ngram_max < NGRAM_MIN_MAX:
            # exllamav2 0.3.2 generator/dynamic.py iterate_ngram_gen (lines 1039-1044): the
            # lookup loops over range(max_ngram - 1), so with 1 it never runs and every draft
            # token is the last token repeated.
            raise InvalidInputError(
                f"ExLlamaV2's n-gram drafter needs ngram_max of {NGRAM_MIN_MAX} or more (it "
                f"was {drafter.ngram_max}): with 1 it never looks anything up and drafts the "
                "last token over and over.", "Use ngram_max 2 to 4 (4 is ExLlamaV2's default).")
        if drafter.kind is DrafterKind.NGRAM:
            notes.append(f"ExLlamaV2's n-gram drafter matches up to {drafter.ngram_max} tokens and "
                         "always drafts k (no minimum match: ngram_min and ngram_short do not apply)")
        if drafter.kind is not DrafterKind.NONE and drafter.adaptive:
            # ExLlamaV2's generator always drafts num_draft_tokens: say so in every label.
            drafter = replace(drafter, adaptive=False)
            notes.append("ExLlamaV2 drafts a fixed num_draft_tokens per step")
        self._drafter = drafter
        self._generator = self._make_generator()
        if not warm:
            # ExLlamaV2's examples warm up before timing: the first jobs pay for autotuning.
            # Once per loaded model set; the runner's warm-up runs cover each arm's shapes.
            if progress is not None:
                progress(LoadProgress("Warming up (kernel autotune)", 0.97))
            self._generator.warmup()
            self._warm = True
        if progress is not None:
            progress(LoadProgress("Ready", 1.0))
        self._loaded = LoadedModel(
            engine=self.name,
            model_path=self._target_info.path,
            device=_device_label(self._x),
            dtype=self._target_info.quant.label,
            drafter=drafter,
            max_seq_len=self._plan.max_seq_len,
            vocab_size=self._target_info.arch.vocab_size,
            eos_token_ids=tuple(sorted(self._eos_ids())),
            notes=tuple(notes),
        )
        return self._loaded

    def _fall_back_to_no_draft(self, exc: BaseException) -> None:
        """A draft failed to load (out of VRAM, cancelled, not a model): free what it took and
        leave the target usable on its own, so the engine is never half-switched."""
        release_failed_load(exc)
        self._free_draft()
        self._plan = plan_context(self._target_info, None, self._spec)
        self._drafter = NO_DRAFT
        if self._loaded is None:  # still inside load(): it unloads everything itself
            return
        self._generator = self._make_generator()
        self._loaded = replace(self._loaded, drafter=NO_DRAFT, max_seq_len=self._plan.max_seq_len)

    def _load_draft(self, path: Path, progress: common.LoadStages) -> None:
        x = self._x
        config = x.ExLlamaV2Config(str(path))
        config.arch_compat_overrides(quiet=True)
        if not self._paged:
            config.no_flash_attn = True
        mask_unpaged_attention(x, config, self._paged)  # the target's note says so
        self._configure(config, self._plan.max_seq_len, self._plan.draft_rope_alpha)
        self._draft_model = x.ExLlamaV2(config)
        self._draft_cache = self._load_with_cache(
            self._draft_model,
            self._spec.draft_cache_mode,
            progress.span("Loading draft weights", 0.7, 0.95),
        )

    def _make_generator(self) -> Any:
        d = self._drafter
        kwargs: dict[str, Any] = {}
        if d.kind is DrafterKind.MODEL:
            kwargs = {
                "draft_model": self._draft_model,
                "draft_cache": self._draft_cache,
                "num_draft_tokens": d.num_draft_tokens,
            }
        elif d.kind is DrafterKind.NGRAM:
            kwargs = {
                "use_ngram_draft": True,
                "max_ngram": d.ngram_max,
                "num_draft_tokens": d.num_draft_tokens,
            }
        return self._x.ExLlamaV2DynamicGenerator(
            model=self._model,
            cache=self._cache,
            tokenizer=self._tokenizer,
            max_batch_size=1,
            max_q_size=q_size(d.num_draft_tokens),
            paged=self._paged,
            **kwargs,
        )

    def _eos_ids(self) -> frozenset[int]:
        generation = getattr(self._model.config, "generation_config", None) or {}
        return common.eos_ids(generation.get("eos_token_id"),
                              getattr(self._tokenizer, "eos_token_id", None))

    # tokens --------------------------------------------------------------------------
    def tokenize(self, text: str, apply_chat_template: bool = False) -> list[int]:
        if self._tokenizer is None:
            raise InvalidInputError("No model is loaded.", "Load a model first.")
        path = self._target_info.path
        if apply_chat_template:
            text = _render_chat_template(path, text)
        ids = self._tokenizer.encode(text, add_bos=False, encode_special_tokens=apply_chat_template)
        # BOS by TabbyAPI's rule, once even after a template that writes it (as the PyTorch
        # engine: core.engines.common.prompt_with_bos).
        return common.prompt_with_bos([int(i) for i in ids[0].tolist()],
                                      getattr(self._tokenizer, "bos_token_id", None), path)

    # generation ----------------------------------------------------------------------
    def generate(
        self,
        request: GenerationRequest,
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> GenerationResult:
        if self._generator is None:
            raise InvalidInputError("No model is loaded.", "Load a model first.")
        import torch

        x = self._x
        prompt_ids = list(request.prompt_ids or ()) or self.tokenize(
            request.prompt, request.apply_chat_template
        )
        if not prompt_ids:
            raise InvalidInputError("The prompt is empty.", "Type a prompt.")
        drafting = self._drafter.kind is not DrafterKind.NONE
        k = self._drafter.num_draft_tokens if drafting else 0
        common.check_length(len(prompt_ids), request.max_new_tokens, self._plan.max_seq_len, k)
        # Greedy runs return each token's pre-sampling logits (dynamic.py 1613, 2116), from
        # which the reader keeps the top-1 minus top-2 gap: a drafted run that parts from
        # the reference where that gap is ~0 is a float tie (EXL2 verifies k + 1 rows with
        # other kernels than it decodes one), not a bug. The first H200 run found drafted
        # runs parting at token 1-2 with nothing to tell which.
        job = x.ExLlamaV2DynamicJob(
            input_ids=torch.tensor([prompt_ids], dtype=torch.long),
            max_new_tokens=job_max_new_tokens(request.max_new_tokens, k),
            gen_settings=sampler_settings(request.sampling, x.ExLlamaV2Sampler),
            seed=request.sampling.seed,
            stop_conditions=sorted(self._eos_ids()) if request.stop_on_eos else None,
            decode_special_tokens=False,
            return_logits=request.sampling.greedy,
        )
        for device in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(device)
        # exllamav2 0.3.2 reuses cached prompt pages between jobs (generator/dynamic.py
        # 2387-2432, 2551-2565): a repeated prompt would get a cheaper prefill and time to
        # first token. Every measured job starts from an empty page table.
        self._generator.reset_page_table()
        reader = _JobReader(job, k, on_event)
        started = time.perf_counter()
        self._generator.enqueue(job)
        try:
            while self._generator.num_remaining_jobs():
                if cancel is not None and cancel.is_set():
                    self._generator.cancel(job)
                    reader.cancelled = True
                    break
                reader.read(self._generator.iterate(), time.perf_counter() - started)
        except BaseException as exc:
            self._generator.clear_queue()
            if is_out_of_memory(exc):
                raise common.out_of_memory(
                    "generating", "Use a shorter prompt or context, or a quantized cache.") from exc
            raise
        peak = sum(
            int(torch.cuda.max_memory_allocated(d)) for d in range(torch.cuda.device_count())
        )
        result = reader.result(prompt_ids, request, self._drafter, peak, time.perf_counter() - started)
        stats = result.stats
        forwards = draft_forwards(stats.drafted, stats.draft_steps) \
            if self._drafter.kind is DrafterKind.MODEL else 0
        return replace(result, stats=replace(stats, weight_bytes_read=weights_read(
            stats.steps, forwards, self._target_bytes, self._draft_bytes)))

    # unloading -----------------------------------------------------------------------
    def _free_draft(self) -> None:
        had_draft = self._draft_model is not None or self._draft_cache is not None
        if self._draft_model is not None:
            self._draft_model.unload()
        self._draft_model = None
        self._draft_cache = None
        self._draft_path = None
        self._draft_notes = ()
        if had_draft:
            # A replaced generator still holds the draft cache, in a reference cycle (its cache
            # pages point back at it): only a collection frees it before the next draft loads.
            self._collect()

    def _collect(self) -> None:
        gc.collect()
        if self._x is not None:
            import torch

            torch.cuda.empty_cache()

    def unload(self) -> None:
        self._generator = None
        self._free_draft()
        if self._model is not None:
            self._model.unload()
        self._model = None
        self._cache = None
        self._tokenizer = None
        self._loaded = None
        self._drafter = NO_DRAFT
        self._warm = False
        self._collect()


class _JobReader:
    """Turns the generator's result dicts for one job into events and final stats."""

    def __init__(self, job: Any, num_draft_tokens: int, on_event: EventCallback | None):
        self.job = job
        self.k = num_draft_tokens
        self.on_event = on_event
        self.cancelled = False
        self.text: list[str] = []
        self.token_ids: list[int] = []
        self.gaps: list[float] = []
        """Top-1 minus top-2 logit of each token, where the job returned its logits."""
        self.from_draft: list[bool] = []
        self.steps = 0
        self.draft_steps = 0
        self.per_position_drafted = [0] * num_draft_tokens
        self.per_position_accepted = [0] * num_draft_tokens
        self.final: dict[str, Any] | None = None
        self.first_token_s: float | None = None
        self._accepted = 0
        self._rejected = 0
        self._new_tokens = 0

    def read(self, results: list[dict[str, Any]], elapsed_s: float) -> None:
        text: list[str] = []
        ids: list[int] = []
        gaps: list[float] = []
        for r in results:
            if r.get("job") is not self.job or r.get("stage") != "streaming":
                continue
            text.append(r.get("text", ""))
            if "token_ids" in r:
                ids.extend(int(t) for t in r["token_ids"].flatten().tolist())
            gaps.extend(top2_gaps(r.get("logits")))
            if r.get("eos"):
                self.final = r
                if r.get("eos_reason") == "stop_token":
                    # On a stop token ExLlamaV2 does not stream what it holds: the tokens of an
                    # unfinished character and the stop token itself come in r["held"]. They
                    # count in new_tokens, and the PyTorch engine keeps the stop token in
                    # token_ids, so take them all (text included) into this last event.
                    held = r.get("held") or {}
                    text.append(held.get("text", ""))
                    if "token_ids" in held:
                        ids.extend(int(t) for t in held["token_ids"].flatten().tolist())
                    else:
                        ids.append(int(r["eos_triggering_token_id"]))
                    gaps.extend(top2_gaps(held.get("logits")))
        new_tokens = int(self.job.new_tokens)
        if new_tokens <= self._new_tokens:
            return
        if self.first_token_s is None:
            self.first_token_s = elapsed_s
        accepted = int(self.job.accepted_draft_tokens) - self._accepted
        rejected = int(self.job.rejected_draft_tokens) - self._rejected
        self._record_step(accepted, rejected, new_tokens - self._new_tokens)
        self.text.extend(text)
        self.token_ids.extend(ids)
        self.gaps.extend(gaps)
        if self.on_event is not None:
            self.on_event(
                GenerationEvent(
                    text="".join(text),
                    token_ids=tuple(ids),
                    from_draft=tuple(self.from_draft[len(self.from_draft) - len(ids) :])
                    if ids
                    else (),
                    step=self.steps,
                    drafted=accepted + rejected,
                    accepted=accepted,
                    new_tokens=new_tokens,
                    total_drafted=self._accepted + self._rejected,
                    total_accepted=self._accepted,
                    elapsed_s=elapsed_s,
                )
            )

    def _record_step(self, accepted: int, rejected: int, emitted: int) -> None:
        self.steps += 1
        self._accepted += accepted
        self._rejected += rejected
        self._new_tokens += emitted
        drafted = accepted + rejected
        if drafted:
            self.draft_steps += 1
        for i in range(min(drafted, self.k)):
            self.per_position_drafted[i] += 1
            if i < accepted:
                self.per_position_accepted[i] += 1
        # The first `accepted` tokens of a step were drafts, the last one the target's own.
        self.from_draft.extend(j < accepted for j in range(emitted))

    def result(
        self,
        prompt_ids: list[int],
        request: GenerationRequest,
        drafter: DrafterSpec,
        peak_vram: int,
        wall_s: float,
    ) -> GenerationResult:
        final = self.final or {}
        reason = StopReason.CANCELLED if self.cancelled else (
            StopReason.EOS if final.get("eos_reason") == "stop_token" else StopReason.MAX_NEW_TOKENS
        )
        text = "".join(self.text)
        prefill_s = float(final.get("time_prefill", 0.0))
        decode_s = float(final.get("time_generate", max(wall_s - prefill_s, 0.0)))
        new_tokens = int(final.get("new_tokens", self._new_tokens))
        stats = GenerationStats(
            prompt_tokens=len(prompt_ids),
            new_tokens=new_tokens,
            prefill_s=prefill_s,
            decode_s=decode_s,
            steps=self.steps,
            draft_steps=self.draft_steps,
            drafted=self._accepted + self._rejected,
            accepted=self._accepted,
            per_position_drafted=tuple(self.per_position_drafted),
            per_position_accepted=tuple(self.per_position_accepted),
            stop_reason=reason,
            time_to_first_token_s=self.first_token_s,
            peak_memory_bytes=peak_vram,
            memory_kind="vram",
        )
        return GenerationResult(
            text=text,
            token_ids=tuple(self.token_ids),
            prompt_ids=tuple(prompt_ids),
            stats=stats,
            drafter=drafter,
            sampling=request.sampling,
            engine=ENGINE_NAME,
            from_draft=tuple(self.from_draft[: len(self.token_ids)]),
            # only when every token has its gap: a partial list would misplace them
            top2_gaps=tuple(self.gaps) if len(self.gaps) == len(self.token_ids) else (),
        )


def top2_gaps(logits: Any) -> list[float]:
    """Top-1 minus top-2 of each row of a job's returned logits (shape 1 x n x vocab);
    nothing when there are none."""
    if logits is None or getattr(logits, "numel", lambda: 0)() == 0:
        return []
    top = logits.float().topk(2, dim=-1).values
    return (top[..., 0] - top[..., 1]).flatten().tolist()


def import_exllamav2() -> Any:
    """The exllamav2 names the engine uses, or an EngineUnavailableError saying why not."""
    from types import SimpleNamespace

    from specdeck.core.engines import availability

    try:
        import exllamav2
        from exllamav2 import attn
        from exllamav2.generator import (
            ExLlamaV2DynamicGenerator,
            ExLlamaV2DynamicJob,
            ExLlamaV2Sampler,
        )
    except BaseException as exc:  # the JIT build raises OSError, RuntimeError, ImportError
        if isinstance(exc, KeyboardInterrupt):
            raise
        availability.record_exllamav2_import(False, f"{type(exc).__name__}: {exc}")
        raise map_import_error(exc) from exc
    availability.record_exllamav2_import(True, "")
    return SimpleNamespace(
        ExLlamaV2=exllamav2.ExLlamaV2,
        ExLlamaV2Config=exllamav2.ExLlamaV2Config,
        ExLlamaV2Tokenizer=exllamav2.ExLlamaV2Tokenizer,
        ExLlamaV2Cache=exllamav2.ExLlamaV2Cache,
        ExLlamaV2Cache_Q8=exllamav2.ExLlamaV2Cache_Q8,
        ExLlamaV2Cache_Q6=exllamav2.ExLlamaV2Cache_Q6,
        ExLlamaV2Cache_Q4=exllamav2.ExLlamaV2Cache_Q4,
        ExLlamaV2DynamicGenerator=ExLlamaV2DynamicGenerator,
        ExLlamaV2DynamicJob=ExLlamaV2DynamicJob,
        ExLlamaV2Sampler=ExLlamaV2Sampler,
        attn=attn,
        version=exllamav2.__version__,
    )


def paged_attention_usable(x: Any, config: Any) -> bool:
    """Paged mode needs flash-attn >= 2.5.7 and Ampere or newer GPUs (TabbyAPI's rule)."""
    import torch

    if not getattr(x.attn, "has_flash_attn_with_paged", False) or config.no_flash_attn:
        return False
    if torch.version.hip:
        return False
    capabilities = [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
    return bool(capabilities) and min(c[0] for c in capabilities) >= FLASH_ATTN_MIN_CAPABILITY


def _gpu_weight_bytes(info: ModelInfo) -> int | None:
    """The weights ExLlamaV2 puts on the GPU (every module but the token embedding)."""
    from specdeck.core.vram.weights import weights_from_files

    try:
        return weights_from_files(info).gpu_bytes
    except (InvalidInputError, OSError, ValueError) as exc:
        log.debug("No weight size for %s: %s", info.path, exc)
        return None


def _device_label(x: Any) -> str:
    import torch

    count = torch.cuda.device_count()
    names = {torch.cuda.get_device_name(i) for i in range(count)}
    return f"{count} x {', '.join(sorted(names))}" if count else "cuda"


def _render_chat_template(model_dir: Path, text: str) -> str:
    """The chat template applied as text (ExLlamaV2 has no Jinja templates of its own)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise EngineUnavailableError(
            "Applying a chat template needs transformers.", "pip install transformers"
        ) from exc
    from specdeck.core.engines.chat import render_chat

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return render_chat(tokenizer, text, tokenize=False, model_name=model_dir.name)
