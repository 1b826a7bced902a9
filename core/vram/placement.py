"""Placing the models on the GPUs the way TabbyAPI + ExLlamaV2 load them.

The draft first (autosplit, or its draft_gpu_split), then the target (autosplit from GPU 0
again, its gpu_split, or everything on GPU 0 with one GPU). Autosplit follows
``load_autosplit_gen``: a module stays on the current GPU if, with its cache layer, the
autosplit reserve and ExLlamaV2's load reserve still fit; manual splits follow
``set_device_map``. The result per GPU is a :class:`GpuPlan`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specdeck.core.units import GiB, MiB, format_bytes
from specdeck.core.vram.costs import ModelCosts, Overheads, model_costs
from specdeck.core.vram.gpus import CudaNamed, GpuSpec
from specdeck.core.vram.request import DEFAULT_AUTOSPLIT_RESERVE_MB, PlanRequest
from specdeck.core.vram.weights import ModelWeights, ModuleKind, ModuleWeights

OVERHEAD_PARTS = ("cuda_context", "blas_workspaces", "scratch", "cache_staging", "rope_tables",
                  "activations", "allocator_slack")
OVERHEAD_LABELS = {
    "cuda_context": "CUDA context, cuBLAS, kernels",
    "blas_workspaces": "cuBLAS workspaces",
    "scratch": "scratch buffers",
    "cache_staging": "quantized-cache staging",
    "rope_tables": "RoPE tables",
    "activations": "activations",
    "allocator_slack": "allocator slack",
}


@dataclass
class _Ledger:
    """One GPU's running totals while the models are placed."""

    spec: GpuSpec
    parts: dict[str, int] = field(default_factory=dict)
    models: set[str] = field(default_factory=set)
    cached_models: set[str] = field(default_factory=set)
    layers: dict[str, list[int]] = field(default_factory=dict)
    passed_over: bool = False
    """An autosplit loader moved on from this GPU, so its fill adapts to reality."""

    def used(self, slack: float, extra: dict[str, int] | None = None) -> int:
        parts = dict(self.parts)
        for key, value in (extra or {}).items():
            parts[key] = parts.get(key, 0) + value
        bulk = sum(v for k, v in parts.items() if k.endswith(("_weights", "_cache")))
        return sum(parts.values()) + int(bulk * slack)

    def add(self, costs: dict[str, int]) -> None:
        for key, value in costs.items():
            self.parts[key] = self.parts.get(key, 0) + value


class _NoFit(Exception):
    """A model cannot be placed; the message says where it ran out."""

    def __init__(self, message: str, missing_bytes: int):
        super().__init__(message)
        self.missing_bytes = missing_bytes
        """Weights and cache of the modules left unplaced: the least that is missing."""


def _unplaced_bytes(model: ModelWeights, module: ModuleWeights, costs: ModelCosts) -> int:
    rest = model.modules[model.modules.index(module):]
    caches = sum(1 for m in rest if m.kind is ModuleKind.ATTENTION)
    return sum(m.nbytes for m in rest) + caches * costs.cache_per_layer


def _module_costs(ledger: _Ledger, role: str, module: ModuleWeights, costs: ModelCosts,
                  overheads: Overheads) -> dict[str, int]:
    """What placing ``module`` of model ``role`` on this GPU would add to it."""
    add = {f"{role}_weights": module.nbytes}
    if module.kind is ModuleKind.ATTENTION:
        add[f"{role}_cache"] = costs.cache_per_layer
        if costs.cache_staging and role not in ledger.cached_models:
            add["cache_staging"] = costs.cache_staging
    if role not in ledger.models:
        add["scratch"] = costs.scratch_fixed
        add["rope_tables"] = costs.rope_tables
        # Both models' forward passes run on one stream, so their freed activations are
        # reused: the GPU keeps the larger of the two.
        add["activations"] = max(0, costs.activations - ledger.parts.get("activations", 0))
        if not ledger.models:
            add["cuda_context"] = overheads.process_bytes(ledger.spec.name)
            add["blas_workspaces"] = overheads.workspace_bytes(ledger.spec.name)
    return add


def _commit(ledger: _Ledger, role: str, module: ModuleWeights, add: dict[str, int]) -> None:
    ledger.add(add)
    ledger.models.add(role)
    if module.kind is ModuleKind.ATTENTION:
        ledger.cached_models.add(role)
        ledger.layers.setdefault(role, []).append(module.layer)


def _place_autosplit(ledgers: list[_Ledger], role: str, model: ModelWeights, costs: ModelCosts,
                     reserve_mb: Sequence[float], overheads: Overheads) -> None:
    """ExLlamaV2's load_autosplit_gen: fill GPU 0, then the next, keeping the reserves free."""
    reserves = [int(math.ceil(v * MiB)) for v in reserve_mb] + [0] * len(ledgers)
    current = 0
    for module in model.modules:
        while True:
            if current >= len(ledgers):
                raise _NoFit(_ran_out(role, model, module), _unplaced_bytes(model, module, costs))
            ledger = ledgers[current]
            add = _module_costs(ledger, role, module, costs, overheads)
            held = reserves[current] + overheads.load_reserve
            if ledger.used(overheads.allocator_slack, add) + held <= ledger.spec.capacity_bytes:
                _commit(ledger, role, module, add)
                break
            ledger.passed_over = True
            current += 1


def _place_split(ledgers: list[_Ledger], role: str, model: ModelWeights, costs: ModelCosts,
                 split_gb: Sequence[float], overheads: Overheads) -> None:
    """ExLlamaV2's set_device_map: each GPU's share must hold the weights and the scratch.

    The share does not include the cache, which is allocated afterwards next to each
    attention layer; the capacity check comes after placement.
    """
    allocation = [gb * GiB - costs.split_constant for gb in split_gb]
    reserve = [0] * len(split_gb)
    reserve_attention = [0] * len(split_gb)
    current = 0
    for module in model.modules:
        scratch = {ModuleKind.ATTENTION: costs.attention_scratch, ModuleKind.MLP: costs.mlp_scratch,
                   ModuleKind.HEAD: costs.head_scratch}.get(module.kind, 0)
        attention = costs.attention_temp if module.kind is ModuleKind.ATTENTION else 0
        while True:
            if current >= len(allocation):
                raise _NoFit(_ran_out(role, model, module, split=True),
                             _unplaced_bytes(model, module, costs))
            need_scratch = max(scratch, reserve[current])
            need_attention = max(attention, reserve_attention[current])
            if module.nbytes + need_scratch + need_attention <= allocation[current]:
                break
            current += 1
        reserve[current], reserve_attention[current] = need_scratch, need_attention
        allocation[current] -= module.nbytes
        ledger = ledgers[current]
        _commit(ledger, role, module, _module_costs(ledger, role, module, costs, overheads))


def _ran_out(role: str, model: ModelWeights, module: ModuleWeights, split: bool = False) -> str:
    where = f"layer {module.layer}" if module.layer is not None else f"the {module.kind.value}"
    done = module.layer if module.layer is not None else model.arch.num_layers
    share = "its gpu_split shares are" if split else "the GPUs are"
    return (f"The {role} does not fit: {share} full at {where} "
            f"({done} of {model.arch.num_layers} layers placed).")


def _layer_range(layers: Iterable[int]) -> tuple[int, int] | None:
    layers = list(layers)
    return (min(layers), max(layers)) if layers else None


class FitVerdict(str, enum.Enum):
    FITS = "fits"
    TIGHT = "tight"
    NO_FIT = "does not fit"


@dataclass(frozen=True)
class GpuPlan(CudaNamed):
    """One GPU in the plan: a stacked breakdown of what it will hold."""

    index: int
    name: str
    total_bytes: int
    capacity_bytes: int
    """What the plan may use: total less the driver's reservation and other programs."""
    reserved_bytes: int
    in_use_bytes: int
    target_weights: int
    target_cache: int
    draft_weights: int
    draft_cache: int
    overhead: dict[str, int]
    """Bytes per overhead part (see OVERHEAD_LABELS)."""
    target_layers: tuple[int, int] | None
    draft_layers: tuple[int, int] | None
    binding: bool
    """False where autosplit moved on to the next GPU (the split adapts to what fits)."""
    nvml_index: int | None = None
    cuda_index: int | None = -1
    cuda_exact: bool = True
    """As on the GpuSpec planned for (see CudaNamed)."""

    @property
    def overhead_bytes(self) -> int:
        return sum(self.overhead.values())

    @property
    def used_bytes(self) -> int:
        return (self.target_weights + self.target_cache + self.draft_weights + self.draft_cache
                + self.overhead_bytes)

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    @property
    def is_used(self) -> bool:
        return self.used_bytes > 0

    def verdict(self, margin: int) -> FitVerdict:
        if self.free_bytes < 0:
            return FitVerdict.NO_FIT
        if self.is_used and self.binding and self.free_bytes < margin:
            return FitVerdict.TIGHT
        return FitVerdict.FITS

    def segments(self) -> list[tuple[str, int]]:
        """(label, bytes) in stacking order, for bars; "free" is clipped at zero."""
        return [
            ("target weights", self.target_weights),
            ("target cache", self.target_cache),
            ("draft weights", self.draft_weights),
            ("draft cache", self.draft_cache),
            ("overhead", self.overhead_bytes),
            ("other programs", self.in_use_bytes),
            ("free", max(0, self.free_bytes)),
        ]

    def to_json(self) -> dict:
        return {
            "index": self.index, "nvml_index": self.nvml_index, "name": self.name,
            "label": self.label,
            "total_bytes": self.total_bytes, "reserved_bytes": self.reserved_bytes,
            "in_use_bytes": self.in_use_bytes, "capacity_bytes": self.capacity_bytes,
            "target_weights": self.target_weights, "target_cache": self.target_cache,
            "draft_weights": self.draft_weights, "draft_cache": self.draft_cache,
            "overhead_bytes": self.overhead_bytes, "overhead": dict(self.overhead),
            "used_bytes": self.used_bytes, "free_bytes": self.free_bytes,
            "target_layers": self.target_layers, "draft_layers": self.draft_layers,
            "binding": self.binding,
        }


def _ledgers_for(request: PlanRequest) -> list[_Ledger]:
    return [_Ledger(spec) for spec in request.gpus]


def place_models(request: PlanRequest, overheads: Overheads) -> tuple[list[_Ledger], _NoFit | None]:
    """Place draft then target as TabbyAPI does; (ledgers, the failure or None)."""
    if request.is_exl3:
        return _place_exl3_models(request, overheads)
    ledgers = _ledgers_for(request)
    tokens = request.cache_tokens
    try:
        if request.draft is not None:
            draft_costs = model_costs(request.draft.arch, request.draft_cache_mode, tokens,
                                      request.chunk_for(request.draft_gpu_split is None),
                                      overheads)
            if request.draft_gpu_split is not None:
                _place_split(ledgers, "draft", request.draft, draft_costs, request.draft_gpu_split,
                             overheads)
            else:  # TabbyAPI loads the draft with autosplit even on one GPU
                _place_autosplit(ledgers, "draft", request.draft, draft_costs,
                                 request.autosplit_reserve_mb, overheads)
        manual = request.gpu_split is not None and len(request.gpus) > 1
        autosplit = not manual and len(request.gpus) > 1 and request.autosplit
        target_costs = model_costs(request.target.arch, request.cache_mode, tokens,
                                   request.chunk_for(autosplit), overheads)
        if manual:
            _place_split(ledgers, "target", request.target, target_costs, request.gpu_split, overheads)
        elif len(request.gpus) == 1 or not request.autosplit:
            # TabbyAPI turns autosplit off for one GPU: everything goes to GPU 0.
            _place_split(ledgers, "target", request.target, target_costs, (float("inf"),), overheads)
        else:
            _place_autosplit(ledgers, "target", request.target, target_costs,
                             request.autosplit_reserve_mb, overheads)
    except _NoFit as exc:
        return ledgers, exc
    return ledgers, None


# TabbyAPI main + ExLlamaV3 ------------------------------------------------------------------
EXL3_DEFAULT_RESERVE_GB = 0.5
"""exllamav3 model/model.py:644 load_gen: a GPU missing from reserve_per_device keeps 0.5 GB
free (TabbyAPI main passes only autosplit_reserve's list, [96] MB by default)."""


def _exl3_limits(request: PlanRequest, split: Sequence[float] | None) -> list[int | None]:
    """Per GPU, what a split lets this load add there: ``use_per_device`` bytes (GiB as
    exllamav3 reads them), or None where the reserve rule applies."""
    if split is None:
        return [None] * len(request.gpus)
    return [int(gb * GiB) for gb in split] + [0] * (len(request.gpus) - len(split))


def _exl3_reserves(request: PlanRequest, manual: bool) -> list[int]:
    """autosplit_reserve per GPU as exllamav3 receives it. TabbyAPI main reads the user's
    list only for autosplit on two or more GPUs; otherwise it keeps its own [96] MB (set in
    ExllamaV3Container.__init__); with a manual gpu_split it passes no reserve at all, so
    exllamav3's default 0.5 GB applies to every GPU."""
    if manual:
        mb: list[float] = []
    elif len(request.gpus) == 1 or not request.autosplit:
        mb = list(DEFAULT_AUTOSPLIT_RESERVE_MB)
    else:
        mb = list(request.autosplit_reserve_mb)
    reserves = [int(v * MiB) for v in mb] \
        + [int(EXL3_DEFAULT_RESERVE_GB * GiB)] * len(request.gpus)
    return reserves[:len(request.gpus)]


def _torch_bytes(ledger: _Ledger, slack: float, add: dict[str, int] | None = None) -> int:
    """What PyTorch's allocator holds on this GPU (everything but the CUDA context)."""
    context = ledger.parts.get("cuda_context", 0) + (add or {}).get("cuda_context", 0)
    return ledger.used(slack, add) - context


def _exl3_cap(ledger: _Ledger, limit: int | None, reserve: int, overheads: Overheads) -> int:
    """The per-process limit exllamav3 1.6.5 sets when its loader reaches this GPU
    (util/memory.py:43 set_memory_fraction_reserve, :66 set_memory_fraction_use): what
    PyTorch already holds there (a draft loaded first) plus the free memory less the
    reserve, or plus ``min(use, free)`` for a split; clamped to [1 %, 100 %] of the GPU."""
    touched = ledger.parts.get("cuda_context", 0) or overheads.process_bytes(ledger.spec.name)
    held = _torch_bytes(ledger, overheads.allocator_slack)
    free = ledger.spec.capacity_bytes - touched - held
    cap = held + (free - reserve if limit is None else min(limit, free))
    total = ledger.spec.total_bytes or ledger.spec.capacity_bytes
    return min(total, max(int(0.01 * total), cap))


def _place_exl3(ledgers: list[_Ledger], role: str, model: ModelWeights, costs: ModelCosts,
                request: PlanRequest, split: Sequence[float] | None, reserves: list[int],
                overheads: Overheads) -> None:
    """exllamav3 1.6.5's _load_autosplit (model/model_ls.py:70), the only loader TabbyAPI
    main uses without tensor parallelism: modules go to the current GPU until one fails there,
    then to the next. A module fails when it raises out of memory under the per-process limit
    set when the loader reached that GPU (:171-173, see :func:`_exl3_cap`), when what is
    allocated plus the largest transient measured there passes that limit (:242), or when the
    GPU's physical headroom falls under that transient plus 256 MiB (:257,
    EXL3_AUTOSPLIT_MARGIN_MB). The ledger counts transients (scratch, activations) as held,
    so the last two read: torch bytes within the limit, and all bytes within the GPU less the
    margin.

    1.4.1 set the limit to the free memory less the reserve, so a draft on the same GPU
    counted twice against the target's limit (measured on a lent H200, docs/vram.md); 1.6.5
    adds what PyTorch already holds back in, and a split's ``use`` is per load."""
    from specdeck.core.vram.exl3 import AUTOSPLIT_MARGIN

    limits = _exl3_limits(request, split)
    active = [i for i, limit in enumerate(limits) if limit is None or limit > 0]
    slack = overheads.allocator_slack
    cap: int | None = None
    position = 0
    for module in model.modules:
        while True:
            if position >= len(active):
                raise _NoFit(_ran_out(role, model, module, split=split is not None),
                             _unplaced_bytes(model, module, costs))
            index = active[position]
            ledger = ledgers[index]
            add = _module_costs(ledger, role, module, costs, overheads)
            if cap is None:  # the loader reaches this GPU: touch it, then set the limit
                cap = _exl3_cap(ledger, limits[index], reserves[index], overheads)
            if (_torch_bytes(ledger, slack, add) <= cap
                    and ledger.used(slack, add) + AUTOSPLIT_MARGIN <= ledger.spec.capacity_bytes):
                _commit(ledger, role, module, add)
                break
            ledger.passed_over = True
            position, cap = position + 1, None


def _place_exl3_models(request: PlanRequest, overheads: Overheads) -> tuple[list[_Ledger], _NoFit | None]:
    """TabbyAPI main's load_model_sync: the draft (or the MTP component) first, with
    autosplit_reserve or draft_gpu_split, then the target with autosplit_reserve or
    gpu_split; with one GPU the same loader runs on GPU 0 (backends/exllamav3/model.py)."""
    from specdeck.core.vram import exl3

    ledgers = _ledgers_for(request)
    tokens = request.cache_tokens
    chunk = request.chunk_for(True)
    manual = request.gpu_split is not None and len(request.gpus) > 1
    reserves = _exl3_reserves(request, manual)
    try:
        if request.draft is not None:
            costs = exl3.model_costs(request.draft.arch, request.draft_cache_mode, tokens, chunk, overheads)
            _place_exl3(ledgers, "draft", request.draft, costs, request,
                        request.draft_gpu_split if manual else None, reserves, overheads)
        costs = exl3.model_costs(request.target.arch, request.cache_mode, tokens, chunk, overheads)
        _place_exl3(ledgers, "target", request.target, costs, request,
                    request.gpu_split if manual else None, reserves, overheads)
    except _NoFit as exc:
        return ledgers, exc
    return ledgers, None


def _gpu_plan(ledger: _Ledger, overheads: Overheads) -> GpuPlan:
    parts = ledger.parts
    bulk = sum(v for k, v in parts.items() if k.endswith(("_weights", "_cache")))
    overhead = {key: parts.get(key, 0) for key in OVERHEAD_PARTS if key != "allocator_slack"}
    overhead["allocator_slack"] = int(bulk * overheads.allocator_slack)
    spec = ledger.spec
    return GpuPlan(
        index=spec.index,
        name=spec.name,
        total_bytes=spec.total_bytes,
        capacity_bytes=spec.capacity_bytes,
        reserved_bytes=spec.reserved_bytes,
        in_use_bytes=spec.in_use_bytes,
        target_weights=parts.get("target_weights", 0),
        target_cache=parts.get("target_cache", 0),
        draft_weights=parts.get("draft_weights", 0),
        draft_cache=parts.get("draft_cache", 0),
        overhead=overhead if bulk else {key: 0 for key in OVERHEAD_PARTS},
        target_layers=_layer_range(ledger.layers.get("target", ())),
        draft_layers=_layer_range(ledger.layers.get("draft", ())),
        binding=not ledger.passed_over,
        nvml_index=spec.nvml_index,
        cuda_index=spec.cuda_index,
        cuda_exact=spec.cuda_exact,
    )


@dataclass(frozen=True)
class Outcome:
    """One placement judged: the per-GPU plans, the verdict, why not, and the headroom."""

    gpus: tuple[GpuPlan, ...]
    verdict: FitVerdict
    problem: str | None
    headroom: int


def evaluate(request: PlanRequest, overheads: Overheads) -> Outcome:
    """Place the models and judge the result (no search, no advice: see plan.plan)."""
    ledgers, failure = place_models(request, overheads)
    gpus = tuple(_gpu_plan(ledger, overheads) for ledger in ledgers)
    if failure is not None:
        return Outcome(gpus, FitVerdict.NO_FIT, str(failure), -failure.missing_bytes)
    verdicts = [g.verdict(overheads.margin) for g in gpus]
    headroom = headroom_of(gpus)
    if FitVerdict.NO_FIT in verdicts:
        short = next(g for g in gpus if g.free_bytes < 0)
        return Outcome(gpus, FitVerdict.NO_FIT, (
            f"{short.in_words[0].upper()}{short.in_words[1:]} would need "
            f"{format_bytes(-short.free_bytes)} more than it has."), headroom)
    return Outcome(gpus, FitVerdict.TIGHT if FitVerdict.TIGHT in verdicts else FitVerdict.FITS, None, headroom)


def headroom_of(gpus: Sequence[GpuPlan]) -> int:
    """Free memory where it counts: on the GPUs whose fill does not adapt (see binding)."""
    used = [g for g in gpus if g.is_used] or list(gpus)
    binding = [g for g in used if g.binding or g.free_bytes < 0] or used
    return min(g.free_bytes for g in binding)


def fits_with_margin(request: PlanRequest, overheads: Overheads) -> bool:
    """Fits, and not merely tight: what the context and bpw searches look for."""
    return evaluate(request, overheads).verdict is FitVerdict.FITS
