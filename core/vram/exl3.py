"""EXL3 models as TabbyAPI's main branch loads them: ExLlamaV3's weights, cache and buffers.

Read from exllamav3's own sources. The 1.6.5 release itself could not be fetched here (no
sdist or wheel reachable, and no 1.6.x tree on hand: the code index holds only a version.py
of 1.6.0.test, 0604813); what follows was read at turboderp-org/exllamav3 4f8ad01
(2026-08-08, version.py 1.4.1, the newest full snapshot on hand). Where 1.6.5 differs, the
plan follows 1.4.1:

- **Weights.** An EXL3 linear layer is stored as ``trellis`` (int16, shape
  ``(in/16, out/16, 16*K)`` for K bits per weight: modules/quant/exl3_lib/quantize.py
  ``pack_trellis``), so ``in*out*K/8`` bytes, plus ``suh`` (fp16, in) and ``svh`` (fp16,
  out) and an optional bias (modules/linear.py ``load_exl3``). The converter writes
  ``quantization_config = {"quant_method": "exl3", "bits", "head_bits", ...}`` into
  config.json (conversion/compile.py); ``bits`` is the average over the layer matrices
  (K varies per tensor), ``head_bits`` the lm_head's. Norms stay fp16.
- **Modules.** The embedding, then one ``TransformerBlock`` per layer (attention and MLP
  together), the final norm, the head (architecture/llama.py). The embedding has
  ``prefer_cpu`` (modules/embedding.py), so it stays in system RAM. The converter clones a
  tied model's head from the embedding and quantizes it at ``head_bits``
  (conversion/convert_model.py, "Cloned lm_head from model.embed_tokens"); only a folder
  with no lm_head tensor uses the fp16 embedding as its head (``alt_key``), on the GPU.
- **Cache** (cache/fp16.py, cache/quant.py): FP16 keeps K and V as fp16, 4E bytes per
  token per layer (E = kv heads x head dim); the quantized cache keeps int32 words of
  ``E/32*k_bits`` and ``E/32*v_bits`` per token plus one fp16 scale per 32 elements for each
  of K and V: ``E*(k_bits+v_bits)/8 + E/8``, the sum exllamav3's own ``storage_size()``
  returns for each cache layer (no GPU needed); k and v bits run from 2 to 8. Pages are 256
  tokens (constants.py PAGE_SIZE). TabbyAPI main maps Q4/Q6/Q8 to 4,4 / 6,6 / 8,8 and takes
  "k,v" pairs (backends/exllamav3/model.py ``create_cache``).
- **Buffers.** A forward pass over more than 144 rows (AUTO_RECONSTRUCT_THRESHOLD) rebuilds
  each weight in fp16 (``reconstruct_hgemm``: ``in x min(out, 32768)`` halves) and rotates
  its input (``xh``, rows x in halves); the autosplit loader runs such a forward of
  ``max_chunk_size`` rows through every module while loading (model/model_ls.py
  ``_load_autosplit``), and the logits layer over ``max_output_size`` = 32 rows
  (model/model.py ``load_gen``), which stays under the threshold.
- **MTP.** Qwen3.5-style models keep multi-token-prediction layers under ``mtp.*``
  (architecture/qwen3_5_mtp.py): an input layer (``mtp.fc`` and two norms),
  ``mtp_num_hidden_layers`` transformer blocks with their own KV cache, ``mtp.norm``; it
  borrows the target's embedding and head. TabbyAPI main's ``draft_mode: mtp`` loads this
  component as the draft model.
"""

from __future__ import annotations

import re
from dataclasses import replace

from specdeck.core.errors import InvalidInputError
from specdeck.core.models import (
    WEIGHT_SUFFIX,
    Architecture,
    ModelInfo,
    read_json,
    read_safetensors_header,
)
from specdeck.core.vram.costs import TENSOR_PAD, ModelCosts, Overheads
from specdeck.core.vram.weights import ModelWeights, ModuleKind, ModuleWeights

EXL3 = "exl3"
DEFAULT_HEAD_BITS = 6
"""exllamav3's converter default (convert.py ``-hb 6``) when quantization_config omits it."""
MIN_BITS, MAX_BITS = 1.0, 8.0
"""EXL3 quantizes at 1 to 8 bits per weight (the trellis' K)."""
RECONSTRUCT_ROWS = 144
"""modules/quant/exl3.py AUTO_RECONSTRUCT_THRESHOLD: above this many rows a forward pass
rebuilds the fp16 weight instead of running the trellis kernel."""
MAX_RECONSTRUCT_SLICE_N = 32768
"""modules/quant/exl3.py: wider weights are rebuilt in slices of this many columns."""
MAX_OUTPUT_ROWS = 32
"""model/model.py load_gen ``max_output_size``: rows the logits layer is loaded for."""
CACHE_BITS = range(2, 9)
"""cache/quant.py: "quantized cache must be from 2 to 8 bits" for K and for V."""
TABBY_CACHE_ALIASES = {"Q4": "4,4", "Q6": "6,6", "Q8": "8,8"}
"""TabbyAPI main's create_cache: the ExLlamaV2 names cast to k,v bit pairs."""
SMALLER_CACHE_MODES = ("FP16", "8,8", "6,6", "5,5", "4,4", "3,3", "2,2")
"""Cache modes the planner suggests, largest first."""

_PAIR = re.compile(r"^\s*([2-8])\s*,\s*([2-8])\s*$")


# cache ---------------------------------------------------------------------------------------
def cache_bits(mode: str) -> tuple[int, int] | None:
    """(k_bits, v_bits) of a cache mode as TabbyAPI main reads it; None for FP16."""
    text = str(mode).strip().upper()
    if text == "FP16":
        return None
    match = _PAIR.match(TABBY_CACHE_ALIASES.get(text, text))
    if match is None:
        raise InvalidInputError(
            f"Cache mode {mode!r} is not one ExLlamaV3 knows.",
            "Use FP16, Q8, Q6, Q4, or a k,v pair of bits from 2 to 8 such as 8,4.")
    return int(match.group(1)), int(match.group(2))


def check_cache_mode(mode: str) -> str:
    """A cache mode in its canonical form: "FP16" or "k,v" (Q4 becomes "4,4")."""
    bits = cache_bits(mode)
    return "FP16" if bits is None else f"{bits[0]},{bits[1]}"


def kv_bytes_per_token_layer(arch: Architecture, mode: str) -> int:
    """Bytes of K+V (and scales) per token per layer, as cache/fp16.py and cache/quant.py
    shape their tensors."""
    width = arch.kv_width
    bits = cache_bits(mode)
    if bits is None:
        return 2 * width * 2
    groups = width // 32
    return 4 * groups * bits[0] + 4 * groups * bits[1] + 2 * (2 * groups)


# weights -------------------------------------------------------------------------------------
def linear_bytes(features_in: int, features_out: int, bits: float) -> int:
    """Storage of one EXL3 linear layer: the trellis at ``bits`` plus suh and svh (fp16)."""
    return round(features_in * features_out * bits / 8) + 2 * features_in + 2 * features_out


def _block_linears(arch: Architecture) -> list[tuple[int, int]]:
    h, q_width, kv_width = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width
    inter, experts = arch.intermediate_size, max(1, arch.num_experts)
    attention = [(h, q_width), (h, kv_width), (h, kv_width), (q_width, h)]
    return attention + [(h, inter), (h, inter), (inter, h)] * experts


def _check_bits(bits: float, head_bits: int) -> None:
    if not MIN_BITS <= bits <= MAX_BITS:
        raise InvalidInputError(f"{bits:g} bits per weight is out of range for EXL3.",
                                "EXL3 quants run from 1 to 8 bits per weight.")
    if not 1 <= head_bits <= 16:
        raise InvalidInputError(f"head bits {head_bits} are out of range (1-16).")


def block_bytes(arch: Architecture, bits: float) -> int:
    """One transformer block: its linears at ``bits``, two fp16 norms, an MoE router."""
    router = 2 * arch.hidden_size * arch.num_experts if arch.num_experts > 1 else 0
    return sum(linear_bytes(i, o, bits) for i, o in _block_linears(arch)) + 2 * 2 * arch.hidden_size + router


def weights_from_bits(arch: Architecture, bits: float, head_bits: int = DEFAULT_HEAD_BITS,
                      name: str = "model") -> ModelWeights:
    """Estimate an EXL3 model from its architecture: blocks at ``bits``, the head at
    ``head_bits``, norms fp16, the fp16 embedding in system RAM."""
    _check_bits(bits, head_bits)
    h = arch.hidden_size
    block = block_bytes(arch, bits)
    modules = [ModuleWeights(ModuleKind.ATTENTION, layer, block) for layer in range(arch.num_layers)]
    modules.append(ModuleWeights(ModuleKind.NORM, None, 2 * h))
    modules.append(ModuleWeights(ModuleKind.HEAD, None, linear_bytes(h, arch.vocab_size, head_bits)))
    return ModelWeights(name, arch, tuple(modules), 2 * arch.vocab_size * h, "bpw", bits, head_bits,
                        quant_format=EXL3)


_LAYER = re.compile(r"^(?:model\.(?:language_model\.)?)?layers\.(\d+)\.")
_MTP = "mtp."
_EMBEDDING = ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight",
              "embed_tokens.weight")


def _tensors(info: ModelInfo):
    for weight_file in sorted(info.path.glob(f"*{WEIGHT_SUFFIX}")):
        yield from read_safetensors_header(weight_file)


def weights_from_files(info: ModelInfo) -> ModelWeights:
    """Exact module sizes of an EXL3 folder, from the safetensors headers' storage sizes:
    what exllamav3 itself lists per module in quantization_config.json (``stored_tensors``)."""
    arch = info.arch
    blocks = [0] * arch.num_layers
    embedding = head = norm = 0
    found = False
    for tensor in _tensors(info):
        found = True
        if tensor.name.startswith(_MTP):
            continue  # the MTP component, loaded only with draft_mode: mtp
        match = _LAYER.match(tensor.name)
        if match and int(match.group(1)) < arch.num_layers:
            blocks[int(match.group(1))] += tensor.nbytes
        elif tensor.name in _EMBEDDING:
            embedding += tensor.nbytes
        elif tensor.name.startswith(("lm_head.", "model.lm_head.")):
            head += tensor.nbytes
        else:
            norm += tensor.nbytes
    if not found:
        raise InvalidInputError(f"{info.path} has no *.safetensors files to measure.")
    if not head and arch.tie_word_embeddings:
        head = embedding  # llama.py: head_alt_key = "model.embed_tokens", fp16 on the GPU
    modules = [ModuleWeights(ModuleKind.ATTENTION, layer, size) for layer, size in enumerate(blocks)]
    modules += [ModuleWeights(ModuleKind.NORM, None, norm), ModuleWeights(ModuleKind.HEAD, None, head)]
    return ModelWeights(info.name, arch, tuple(modules), embedding, "files", info.quant.bits,
                        info.quant.head_bits, quant_format=EXL3)


def mtp_layers(info: ModelInfo) -> int:
    """``mtp_num_hidden_layers`` from config.json (or its text_config); 0 without MTP."""
    config = read_json(info.path / "config.json")
    for source in (config.get("text_config"), config):
        if isinstance(source, dict) and isinstance(source.get("mtp_num_hidden_layers"), int):
            return max(0, int(source["mtp_num_hidden_layers"]))
    return 0


def mtp_weights(info: ModelInfo) -> ModelWeights:
    """The MTP component of an EXL3 model as TabbyAPI main's ``draft_mode: mtp`` loads it:
    the ``mtp.*`` tensors (exact, from the files), its blocks with their own cache."""
    layers = mtp_layers(info)
    if layers == 0:
        raise InvalidInputError(
            f"{info.path.name} has no MTP layers (config.json sets no mtp_num_hidden_layers).",
            "Use draft_mode: model with a draft model, or ngram.")
    blocks = [0] * layers
    rest = 0
    found = False
    for tensor in _tensors(info):
        if not tensor.name.startswith(_MTP):
            continue
        found = True
        match = re.match(r"^mtp\.layers\.(\d+)\.", tensor.name)
        if match and int(match.group(1)) < layers:
            blocks[int(match.group(1))] += tensor.nbytes
        else:
            rest += tensor.nbytes  # mtp.fc, its norms, mtp.norm
    if not found:
        raise InvalidInputError(
            f"{info.path.name} names {layers} MTP layers but its files hold no mtp.* tensors.",
            "Use an EXL3 quant converted with its MTP layers, or another draft mode.")
    arch = info.arch
    mtp_arch = replace(arch, num_layers=layers)
    modules = [ModuleWeights(ModuleKind.NORM, None, rest)]
    modules += [ModuleWeights(ModuleKind.ATTENTION, layer, size) for layer, size in enumerate(blocks)]
    return ModelWeights(f"{info.name} (MTP)", mtp_arch, tuple(modules), 0, "files",
                        info.quant.bits, info.quant.head_bits, quant_format=EXL3)


# buffers -------------------------------------------------------------------------------------
def model_costs(arch: Architecture, mode: str, tokens: int, chunk: int,
                overheads: Overheads) -> ModelCosts:
    """What an EXL3 model adds on a GPU besides weights: its cache, the quantized cache's
    fp16 K/V temporaries, the largest rebuilt weight of a chunk's forward pass, and that
    pass's activations. ExLlamaV2's manual-split bookkeeping has no ExLlamaV3 counterpart."""
    h, q_width, kv_width = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width
    linears = _block_linears(arch)
    rebuilt = max(2 * i * min(o, MAX_RECONSTRUCT_SLICE_N) for i, o in linears) if chunk > RECONSTRUCT_ROWS else 0
    rotated = chunk * max(i for i, _ in linears) * 2 + TENSOR_PAD
    activations = (chunk * 2 * (2 * h + 2 * q_width + 2 * kv_width)
                   + chunk * arch.intermediate_size * 4 * 2  # gate/up in float (interm_dtype)
                   + MAX_OUTPUT_ROWS * arch.vocab_size * 4)
    return ModelCosts(
        cache_per_layer=kv_bytes_per_token_layer(arch, mode) * tokens,
        cache_staging=0 if cache_bits(mode) is None else 2 * 2 * kv_width * tokens,
        scratch_fixed=rebuilt + rotated,
        rope_tables=0,
        activations=activations,
        attention_scratch=0,
        mlp_scratch=0,
        head_scratch=0,
        attention_temp=0,
        split_constant=0,
    )


def tabby_chunk_size(chunk: int) -> int:
    """TabbyAPI main's adjust_chunk_size: at least 256, rounded up to a multiple of 256 (no
    clamp to max_seq_len, unlike its ExLlamaV2 backend)."""
    chunk = max(256, int(chunk))
    return (chunk + 255) // 256 * 256
