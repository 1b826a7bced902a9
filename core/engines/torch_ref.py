"""The PyTorch reference engine: Hugging Face-format models, CPU or any torch device.

transformers does the model forward; the speculative loop is ours (speculative.py), so
every number it reports is defined the same way for every drafter: no drafter, n-gram
prompt lookup, or a draft model (which may be the target itself: self-drafting accepts
every draft token, a check of the loop).

Defaults chosen for honest A/B runs: greedy sampling, float32 on CPU (bfloat16 ties flip the
argmax between batch shapes, see lossless.py), linear layers pre-packed for oneDNN on CPU
where that does not slow plain decoding on this CPU (cpu_linear.py, timed at load; both arms
get the same layers).

Importing this module imports torch: the engine registry imports it only when an engine is
created, never to list engines.
"""

from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from specdeck.core.engines import cpu_linear
from specdeck.core.engines.base import (
    NO_DRAFT,
    DrafterKind,
    DrafterSpec,
    EventCallback,
    GenerationRequest,
    GenerationResult,
    LoadedModel,
    LoadSpec,
    ProgressCallback,
    weights_read,
)
from specdeck.core.engines.common import (
    LoadStages,
    check_length,
    check_model_folder,
    eos_ids,
    freed,
    out_of_memory,
    prompt_with_bos,
    require_compatible_draft,
)
from specdeck.core.engines.detok import StreamDecoder
from specdeck.core.engines.sampling import TokenPicker
from specdeck.core.engines.speculative import (
    Drafter,
    Generation,
    KVModel,
    ModelDrafter,
    NgramDrafter,
    RunSettings,
)
from specdeck.core.errors import InvalidInputError, NotFoundError

log = logging.getLogger(__name__)

ENGINE_NAME = "torch"
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
OOM_FIX = "Use a smaller model, a shorter context, or a lower-precision dtype."


@dataclass
class _LoadedLM:
    """A model and its tokenizer, as loaded from one folder."""

    path: Path
    model: torch.nn.Module
    tokenizer: object
    vocab_size: int
    packing: cpu_linear.Choice
    """Whether its linear layers were pre-packed for oneDNN, and the timing that decided."""
    weight_bytes: int
    """Weights one forward reads (see :func:`_weight_bytes`)."""


class TorchEngine:
    """See the module docstring. All calls must come from one thread."""

    name = ENGINE_NAME

    def __init__(self, prepack: bool | None = None):
        """``prepack``: oneDNN pre-packed linear layers on CPU (float32): True always, False
        never, None (default) where a 1-token forward is not slower packed on this CPU
        (timed at load, cpu_linear.choose)."""
        self._prepack = prepack
        self._device: torch.device | None = None
        self._dtype: torch.dtype | None = None
        self._target: _LoadedLM | None = None
        self._draft: _LoadedLM | None = None
        self._draft_notes: tuple[str, ...] = ()
        """core.compat's warnings about the loaded draft."""
        self._drafter_spec: DrafterSpec = NO_DRAFT
        self._eos: frozenset[int] = frozenset()
        self._max_seq_len = 0
        self._loaded: LoadedModel | None = None

    # loading -------------------------------------------------------------------------
    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    def model_objects(self) -> tuple[torch.nn.Module, torch.nn.Module | None]:
        """The loaded target's and draft's model objects (oneDNN-packed where the engine
        packed them), for benchmarks that run another decoding loop on the same weights."""
        target = self._require_target()
        return target.model, self._draft.model if self._draft is not None else None

    def loaded_packing(self) -> cpu_linear.Choice:
        """Whether the target's linear layers were pre-packed, with the timings behind it."""
        return self._require_target().packing

    def load(
        self,
        spec: LoadSpec,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LoadedModel:
        self.unload()
        report = LoadStages(progress, cancel)
        try:
            self._device = resolve_device(spec.device)
            self._dtype = resolve_dtype(spec.dtype, self._device)
            report("Checking the model folder", 0.0)
            _check_folder(Path(spec.model_path), "model")
            self._target = self._load_lm(Path(spec.model_path), report, cancel, "target", 0.05)
            config = self._target.model.config
            config = getattr(config, "get_text_config", lambda: config)()
            native = int(getattr(config, "max_position_embeddings", 0) or 0)
            self._max_seq_len = spec.max_seq_len or native or 2048
            self._eos = eos_ids(
                getattr(getattr(self._target.model, "generation_config", None), "eos_token_id", None),
                getattr(self._target.tokenizer, "eos_token_id", None))
            return self.set_drafter(spec.drafter, progress, cancel)
        except BaseException as exc:  # noqa: BLE001 - free everything, then re-raise
            self.unload()
            _raise_mapped(exc, Path(spec.model_path))

    def set_drafter(
        self,
        drafter: DrafterSpec,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LoadedModel:
        if self._target is None:
            raise InvalidInputError("No model is loaded.", "Load a target model first.")
        report = LoadStages(progress, cancel, kept=self._target.path.name)
        wanted = drafter.model_path if drafter.kind is DrafterKind.MODEL else None
        # Arms without a draft model keep a loaded one parked (unused): an interleaved A/B
        # run switches arms for every prompt and must not reload the draft each time.
        keep = self._draft is not None and (wanted is None or self._draft.path == Path(wanted))
        if not keep:
            self._release_draft()
        if wanted is not None and not keep:
            path = Path(wanted)
            if _same_folder(path, self._target.path):
                # Self-drafting: share the weights, keep a separate cache.
                self._draft = self._target
            else:
                try:
                    _check_folder(path, "draft model")
                    self._draft_notes = require_compatible_draft(self._target.path, path,
                                                                 self._max_seq_len)
                    self._draft = self._load_lm(path, report, cancel, "draft", 0.6)
                except BaseException as exc:  # noqa: BLE001 - free the draft, re-raise
                    # The target stays loaded and runs without a draft, labelled so: never
                    # a MODEL arm label on a run that had no draft model.
                    self._release_draft()
                    self._drafter_spec = NO_DRAFT
                    if self._loaded is not None:
                        self._loaded = self._describe()
                    _raise_mapped(exc, path)
        self._drafter_spec = drafter
        report("Ready", 1.0)
        self._loaded = self._describe()
        return self._loaded

    def _load_lm(
        self,
        path: Path,
        report: LoadStages,
        cancel: threading.Event | None,
        role: str,
        start: float,
    ) -> _LoadedLM:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        report(f"Loading the {role} tokenizer", start)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        report(f"Loading the {role} weights", start + 0.05)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=self._dtype)
        model.to(self._device)
        model.eval()
        report.check_cancel()
        weight_bytes = _weight_bytes(model)  # before packing moves weights out of parameters
        packing = cpu_linear.Choice(0)
        if self._prepack is not False and cpu_linear.supported(self._device, self._dtype):
            if self._prepack:
                report(f"Packing the {role}'s linear layers for oneDNN", start + 0.3)
                packing = cpu_linear.Choice(cpu_linear.prepack_linears(model))
            else:
                report(f"Timing the {role}'s linear layers packed for oneDNN and plain", start + 0.3)
                packing = cpu_linear.choose(model, self._device)
        return _LoadedLM(path, model, tokenizer, _output_vocab(model), packing, weight_bytes)

    def _describe(self) -> LoadedModel:
        notes = []
        if (packing := self._target.packing.note()) is not None:
            notes.append(packing)
        if self._draft is self._target and self._drafter_spec.kind is DrafterKind.MODEL:
            notes.append("self-drafting: the draft shares the target's weights")
        elif self._draft is not None and self._drafter_spec.kind is DrafterKind.MODEL:
            notes.extend(self._draft_notes)
        if self._dtype != torch.float32:
            notes.append("not float32: greedy ties may flip between batch shapes")
        return LoadedModel(
            engine=self.name,
            model_path=self._target.path,
            device=str(self._device),
            dtype=str(self._dtype).removeprefix("torch."),
            drafter=self._drafter_spec,
            max_seq_len=self._max_seq_len,
            vocab_size=self._target.vocab_size,
            eos_token_ids=tuple(sorted(self._eos)),
            notes=tuple(notes),
        )

    # tokens --------------------------------------------------------------------------
    def tokenize(self, text: str, apply_chat_template: bool = False) -> list[int]:
        """The prompt's ids as TabbyAPI would send them (BOS by ``core.compat.special``'s
        rule, not by this tokenizer's own post-processor)."""
        target = self._require_target()
        tokenizer = target.tokenizer
        if apply_chat_template:
            from specdeck.core.engines.chat import render_chat

            text = render_chat(tokenizer, text, tokenize=False, model_name=target.path.name)
        ids = [int(i) for i in tokenizer(text, add_special_tokens=False).input_ids]
        return prompt_with_bos(ids, tokenizer.bos_token_id, target.path)

    def decode(self, ids: list[int]) -> str:
        return self._require_target().tokenizer.decode(ids, skip_special_tokens=True)

    # generation ----------------------------------------------------------------------
    def generate(
        self,
        request: GenerationRequest,
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> GenerationResult:
        target = self._require_target()
        prompt_ids = list(request.prompt_ids or ())
        if not prompt_ids:
            if not request.prompt:
                raise InvalidInputError("The prompt is empty.", "Type a prompt.")
            prompt_ids = self.tokenize(request.prompt, request.apply_chat_template)
        check_length(len(prompt_ids), request.max_new_tokens, self._max_seq_len)
        bad = [i for i in prompt_ids if not 0 <= i < target.vocab_size]
        if bad:
            raise InvalidInputError(
                f"Prompt token id {bad[0]} is outside the model's vocabulary "
                f"(0..{target.vocab_size - 1}).",
                "Tokenize the prompt with this model's tokenizer.",
            )
        picker = TokenPicker(request.sampling, target.vocab_size, self._device, prompt_ids)
        memory = _MemoryProbe(self._device)
        try:
            output = Generation(
                KVModel(target.model, self._device),
                self._make_drafter(),
                picker,
                prompt_ids,
                RunSettings(
                    max_new_tokens=request.max_new_tokens,
                    num_draft_tokens=self._drafter_spec.num_draft_tokens,
                    eos_token_ids=self._eos,
                    stop_on_eos=request.stop_on_eos,
                    adaptive_draft_length=self._drafter_spec.adaptive,
                ),
                StreamDecoder(self.decode, prompt_ids),
                on_event,
                cancel,
                memory.sample,
            ).run()
        except (torch.OutOfMemoryError, MemoryError) as exc:
            raise out_of_memory(f"generating with {target.path.name}", OOM_FIX) from exc
        finally:
            # The run's caches and tensors are young objects: a young-generation collection
            # frees them. A full collection here would hold the GIL for a few hundred ms in a
            # process as big as the GUI's (torch, transformers, Qt) and freeze its frames.
            gc.collect(1)
        drafting_model = self._drafter_spec.kind is DrafterKind.MODEL and self._draft is not None
        stats = replace(
            output.stats, peak_memory_bytes=memory.peak, memory_kind=memory.kind,
            weight_bytes_read=weights_read(
                output.stats.steps, output.stats.drafted if drafting_model else 0,
                target.weight_bytes, self._draft.weight_bytes if drafting_model else 0),
        )
        return GenerationResult(
            text=output.text,  # the streamed pieces: keeps a leading space decode() drops
            token_ids=tuple(output.token_ids),
            prompt_ids=tuple(prompt_ids),
            stats=stats,
            drafter=self._drafter_spec,
            sampling=request.sampling,
            engine=self.name,
            from_draft=tuple(output.from_draft),
            top2_gaps=tuple(output.top2_gaps),
        )

    def _make_drafter(self) -> Drafter | None:
        spec = self._drafter_spec
        if spec.kind is DrafterKind.NGRAM:
            return NgramDrafter(spec.ngram_max, spec.ngram_min, spec.ngram_short)
        if spec.kind is DrafterKind.MODEL and self._draft is not None:
            return ModelDrafter(KVModel(self._draft.model, self._device))
        return None

    def _require_target(self) -> _LoadedLM:
        if self._target is None:
            raise InvalidInputError("No model is loaded.", "Load a model first.")
        return self._target

    # unloading -----------------------------------------------------------------------
    def _release_draft(self) -> None:
        self._draft = None
        gc.collect()

    def unload(self) -> None:
        had_cuda = self._device is not None and self._device.type == "cuda"
        self._draft = None
        self._target = None
        self._loaded = None
        self._drafter_spec = NO_DRAFT
        gc.collect()
        if had_cuda:
            torch.cuda.empty_cache()


# helpers ---------------------------------------------------------------------------------
def resolve_device(name: str) -> torch.device:
    """"auto" = the first CUDA GPU if torch sees one, else the CPU."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise InvalidInputError(
            f"Unknown device {name!r}.", 'Use "auto", "cpu", "cuda" or "cuda:N".'
        ) from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError(
            f"Device {name} was asked for, but this torch ({torch.__version__}) sees no CUDA GPU.",
            'Use --device cpu, or install a CUDA build of torch.',
        )
    if (
        device.type == "cuda"
        and device.index is not None
        and device.index >= torch.cuda.device_count()
    ):
        raise InvalidInputError(
            f"Device {name} does not exist: torch sees {torch.cuda.device_count()} GPU(s)."
        )
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """"auto" = float32 on CPU (exact greedy A/B), bfloat16 (else float16) on a GPU."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name not in DTYPES:
        raise InvalidInputError(
            f"Unknown dtype {name!r}.", "Use auto, float32, bfloat16 or float16."
        )
    return DTYPES[name]


def _check_folder(path: Path, role: str) -> None:
    """Fail early, with a reason, on folders transformers cannot load."""
    check_model_folder(
        path, role, loads=("none",),
        wrong_quant="The {role} {name} is quantized ({label}); the PyTorch engine loads "
                    "unquantized Hugging Face models.",
        wrong_quant_fix="Use the exllamav2 engine for EXL2 models, or pick the unquantized "
                        "original.",
        weights=("*.safetensors", "pytorch_model*.bin"))


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights one forward reads: every parameter except the input embedding (a
    forward reads only its tokens' rows of it), unless the output head shares that matrix."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    skip = None if head is not None and head.weight is embedding else embedding
    return sum(p.numel() * p.element_size() for p in model.parameters() if p is not skip)


def _output_vocab(model: torch.nn.Module) -> int:
    """Width of the logits (the config's vocab_size may differ from the head's rows)."""
    head = model.get_output_embeddings()
    return int(getattr(head, "out_features", 0) or model.config.vocab_size)


def _raise_mapped(exc: BaseException, path: Path) -> None:
    mapped = _map_load_error(exc, path)
    if mapped is exc:
        raise exc
    raise mapped from exc


def _map_load_error(exc: BaseException, path: Path) -> BaseException:
    """A SpecDeckError the user can act on, or ``exc`` itself when it is a bug."""
    from specdeck.core.errors import SpecDeckError

    if isinstance(exc, SpecDeckError):
        return exc
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return out_of_memory(f"loading {path.name}", OOM_FIX, freed(None))
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f"Cannot load {path}: {exc}.")
    if isinstance(exc, (OSError, ValueError, KeyError)):
        return InvalidInputError(
            f"transformers cannot load {path.name}: {exc}",
            "Check that the folder holds a complete Hugging Face model "
            "(config.json, weights, tokenizer) of an architecture transformers supports.",
        )
    return exc


class _MemoryProbe:
    """Peak VRAM (CUDA) or resident memory (elsewhere) while a generation runs."""

    def __init__(self, device: torch.device):
        self._device = device
        self.peak: int | None = None
        if device.type == "cuda":
            self.kind = "vram"
            torch.cuda.reset_peak_memory_stats(device)
        else:
            self.kind = "rss"
            import psutil

            self._process = psutil.Process()
        self.sample()

    def sample(self) -> None:
        if self.kind == "vram":
            value = int(torch.cuda.max_memory_allocated(self._device))
        else:
            value = int(self._process.memory_info().rss)
        self.peak = value if self.peak is None else max(self.peak, value)
