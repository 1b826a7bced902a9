"""EXL3 models as TabbyAPI's main branch loads them: ExLlamaV3's weights, cache and buffers.

Read from exllamav3 1.6.5's own sources (the py3-none-any wheel on PyPI, version.py 1.6.5),
diffed against 1.4.1's wheel; file:line below is 1.6.5's. What 1.6.5 changed that matters for
memory is marked "1.6.5"; folders written by older converters keep their own rules.

- **Weights.** An EXL3 linear layer is stored as ``trellis`` (int16, shape
  ``(in/16, out/16, 16*K)``: modules/quant/exl3_lib/quantize.py:1117 ``pack_trellis`` with
  :115 ``trellis_words``), so ``in*out*K/8`` bytes, plus ``suh`` (fp16, in) and ``svh`` (fp16,
  out), an optional fp16 bias, and a 4-byte int32 codebook marker (``mul1`` by default, or
  ``mcg``) that never reaches the GPU (loader/safetensors.py:638 ``get_codebook_marker``, a
  shared CPU tensor; 1.4.1 loaded it to the CPU too). 1.6.5: K may be a half-integer (1.5, 2.5,
  3.5 with the mul1 codebook; modules/quant/exl3.py:68 reads K as ``shape[-1] / 16``), which
  the same formula covers. Older folders store the sign vectors packed (``su``/``sv``, int16,
  one bit per element): modules/linear.py:435 ``load_exl3`` unpacks them to fp16 on the GPU
  (16x their size on disk), and a float32 bias is halved (modules/quant/exl3.py:49); their
  ``scale`` is not loaded (linear.py:445). The converter writes ``quantization_config =
  {"quant_method": "exl3", "version", "bits", "head_bits", "calibration", "out_scales",
  "codebook"}`` (+ ``mtp_bits`` with MTP layers, ``vision_bits``) into config.json
  (conversion/compile.py:196); ``bits`` is the average over the layer matrices (K varies per
  tensor), ``head_bits`` the lm_head's: 1-8, 1.6.5 also 1.5/2.5/3.5, or 16 for an fp16 head
  (``lm_head.weight``, conversion/convert_model.py:77). Norms stay fp16; Qwen2 keeps its
  q/k/v biases (architecture/qwen2.py: "bias on Q, K and V projections").
- **Modules.** The embedding, then one ``TransformerBlock`` per layer (attention and MLP
  together), the final norm, the head (architecture/llama.py). The embedding has
  ``prefer_cpu`` (modules/embedding.py:101), so it stays in system RAM. 1.6.5: a table
  quantized with ``--embed_bits`` (``<key>.trellis`` + ``<key>.signs``,
  conversion/ngram.py:115 ``quantize_embedding``) is held in RAM as a row table too and only
  its fp16 ``signs`` (groups x 256) go to the GPU. The converter clones a tied model's head
  from the embedding and quantizes it at ``head_bits`` (conversion/convert_model.py:1452,
  "Cloned lm_head from model.embed_tokens"); 1.6.5 then writes ``tie_word_embeddings: false``
  (conversion/quant_config.py:5 ``update_config``). Only a folder with no lm_head tensor and a
  tied config uses the fp16 embedding as its head (llama.py:121 ``head_alt_key``), on the GPU.
- **Cache** (cache/fp16.py:92, cache/quant.py:137 ``storage_size``, unchanged since 1.4.1):
  FP16 keeps K and V as fp16, 4E bytes per token per layer (E = kv heads x head dim); the
  quantized cache keeps int32 words of ``E/32*k_bits`` and ``E/32*v_bits`` per token plus one
  fp16 scale per 32 elements for each of K and V (quant.py:40-42): ``E*(k_bits+v_bits)/8 +
  E/8``; k and v bits run from 2 to 8. Pages are 256 tokens (constants.py:2 PAGE_SIZE).
  TabbyAPI main maps Q4/Q6/Q8 to 4,4 / 6,6 / 8,8 and takes "k,v" pairs
  (backends/exllamav3/model.py ``create_cache``).
- **Buffers.** A forward pass over more than 144 rows (modules/quant/exl3.py:10
  AUTO_RECONSTRUCT_THRESHOLD) rebuilds each weight in fp16 (:166 ``reconstruct_hgemm``: ``in x
  min(out, 32768)`` halves); 1.6.5 rotates the input into a copy (``xh``, rows x in halves)
  only below 1024 rows or for dimensions not divisible by 128 (:189 ``use_fused``), so a
  chunk's worst case is the 1023-row pass. The autosplit loader runs such a forward of
  ``max_chunk_size`` rows through every module while loading (model/model_ls.py:70
  ``_load_autosplit``), and the logits layer over ``max_output_size`` = 32 rows
  (model/model.py:484 ``load_gen``), which stays under the threshold. 1.6.5 loads weight
  tensors of up to 16 MiB into shared 128 MiB blocks (loader/safetensors.py:688
  ``ARENA_BLOCK``, :704 ``_arena_alloc``): counted here as one block per model per GPU (the
  newest block's unused tail; older open blocks keep tails under 16 MiB, not counted).
- **Memory limit** (placement.py ``_place_exl3``). 1.6.5 sets the per-process limit to what
  PyTorch already holds plus the free memory less the reserve (util/memory.py:43
  ``set_memory_fraction_reserve``), or plus ``min(use, free)`` for a split (:66
  ``set_memory_fraction_use``): a draft loaded first no longer counts twice (1.4.1: free less
  reserve, or ``use`` in all). A device is also closed when its physical headroom falls under
  the largest transient measured there plus 256 MiB (model_ls.py:132
  ``EXL3_AUTOSPLIT_MARGIN_MB``, :257).
- **MTP.** Qwen3.5-style models keep multi-token-prediction layers under ``mtp.*``
  (architecture/qwen3_5_mtp.py:21, unchanged in memory terms): an input layer (``mtp.fc`` and
  two norms), ``mtp_num_hidden_layers`` transformer blocks with their own KV cache,
  ``mtp.norm``; it borrows the target's embedding and head. 1.6.5's converter quantizes them at
  ``mtp_bits`` (default 4), recorded in quantization_config. TabbyAPI main's ``draft_mode:
  mtp`` loads this component as the draft model.
"""

from __future__ import annotations

import re
from dataclasses import replace

from specdeck.core import models
from specdeck.core.errors import InvalidInputError
from specdeck.core.models import (
    WEIGHT_SUFFIX,
    Architecture,
    ModelInfo,
    read_json,
    read_safetensors_header,
)
from specdeck.core.units import MiB
from specdeck.core.vram.costs import TENSOR_PAD, ModelCosts, Overheads
from specdeck.core.vram.weights import ModelWeights, ModuleKind, ModuleWeights, check_head_bits

EXL3 = "exl3"
EXLLAMAV3_VERSION = "1.6.5"
"""The exllamav3 release this plan follows (see the module docstring)."""
DEFAULT_HEAD_BITS = 6
"""exllamav3's converter default (conversion/convert_model.py:273 ``head_bits`` 6) when
quantization_config omits it."""
FP16_HEAD_BITS = 16
"""``--head_bits 16`` keeps the head unquantized: ``lm_head.weight`` in fp16, no trellis."""
MIN_BITS, MAX_BITS = 1.0, 8.0
"""EXL3 quantizes at 1 to 8 bits per weight (the trellis' K; 1.6.5 also 1.5, 2.5, 3.5)."""
RECONSTRUCT_ROWS = 144
"""modules/quant/exl3.py:10 AUTO_RECONSTRUCT_THRESHOLD: above this many rows a forward pass
rebuilds the fp16 weight instead of running the trellis kernel."""
FUSED_RECONSTRUCT_ROWS = 1024
"""modules/quant/exl3.py:189 (1.6.5): from this many rows, with both dimensions divisible by
128, the rebuilt weight takes the Hadamard rotations and the input is used as it is (no
``xh`` copy)."""
MAX_RECONSTRUCT_SLICE_N = 32768
"""modules/quant/exl3.py:11: wider weights are rebuilt in slices of this many columns."""
MAX_OUTPUT_ROWS = 32
"""model/model.py:484 load_gen ``max_output_size``: rows the logits layer is loaded for."""
ARENA_BLOCK = 128 * MiB
"""loader/safetensors.py:688 (1.6.5) ``ARENA_BLOCK``: weight tensors of up to 16 MiB are
carved out of shared blocks of this size while a module loads."""
PAGE_SIZE = 256
"""Tokens per page of exllamav3's cache (constants.py ``PAGE_SIZE``); TabbyAPI main's
adjust_chunk_size raises chunk_size to at least this and to a multiple of it
(:func:`tabby_chunk_size`)."""
AUTOSPLIT_MARGIN = 256 * MiB
"""model/model_ls.py:132 (1.6.5) ``EXL3_AUTOSPLIT_MARGIN_MB`` default: physical headroom a
device must keep beyond the largest measured transient, or the loader moves on."""
CACHE_BITS = range(2, 9)
"""cache/quant.py: "quantized cache must be from 2 to 8 bits" for K and for V."""
CACHE_BITS_TEXT = f"from {CACHE_BITS[0]} to {CACHE_BITS[-1]}"
"""The same as the help texts and messages say it."""
TABBY_CACHE_ALIASES = {"Q4": "4,4", "Q6": "6,6", "Q8": "8,8"}
"""TabbyAPI main's create_cache: the ExLlamaV2 names cast to k,v bit pairs."""
SMALLER_CACHE_MODES = ("FP16", "8,8", "6,6", "5,5", "4,4", "3,3", "2,2")
"""Cache modes the planner suggests, largest first."""

assert CACHE_BITS[-1] < 10, "one digit each, as _PAIR reads them"
_BITS = f"([{CACHE_BITS[0]}-{CACHE_BITS[-1]}])"
_PAIR = re.compile(rf"^\s*{_BITS}\s*,\s*{_BITS}\s*$")


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
            f"Use FP16, Q8, Q6, Q4, or a k,v pair of bits {CACHE_BITS_TEXT} such as 8,4.")
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
    """GPU storage of one EXL3 linear layer: the trellis at ``bits`` plus suh and svh (fp16);
    at 16 bits, an unquantized fp16 weight (the converter's ``--head_bits 16``)."""
    if bits == FP16_HEAD_BITS:
        return 2 * features_in * features_out
    return round(features_in * features_out * bits / 8) + 2 * features_in + 2 * features_out


def _qkv_bias_bytes(arch: Architecture) -> int:
    """Qwen2's q/k/v biases, fp16 (exllamav3 architecture/qwen2.py; Linear loads any .bias)."""
    if arch.model_type not in ("qwen2", "qwen2_moe"):
        return 0
    return 2 * (arch.num_heads * arch.head_dim + 2 * arch.kv_width)


def _block_linears(arch: Architecture) -> list[tuple[int, int]]:
    h, q_width, kv_width = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width
    inter, experts = arch.intermediate_size, max(1, arch.num_experts)
    attention = [(h, q_width), (h, kv_width), (h, kv_width), (q_width, h)]
    return attention + [(h, inter), (h, inter), (inter, h)] * experts


def _check_bits(bits: float, head_bits: float) -> None:
    if not MIN_BITS <= bits <= MAX_BITS:
        raise InvalidInputError(f"{bits:g} bits per weight is out of range for EXL3.",
                                "EXL3 quants run from 1 to 8 bits per weight.")
    check_head_bits(head_bits)


def block_bytes(arch: Architecture, bits: float) -> int:
    """One transformer block: its linears at ``bits``, two fp16 norms, an MoE router, Qwen2's
    q/k/v biases."""
    router = 2 * arch.hidden_size * arch.num_experts if arch.num_experts > 1 else 0
    return (sum(linear_bytes(i, o, bits) for i, o in _block_linears(arch)) + 2 * 2 * arch.hidden_size
            + router + _qkv_bias_bytes(arch))


def weights_from_bits(arch: Architecture, bits: float, head_bits: float = DEFAULT_HEAD_BITS,
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
_EMBEDDING_KEYS = ("model.embed_tokens", "model.language_model.embed_tokens", "embed_tokens")
_EMBEDDING = tuple(f"{key}.weight" for key in _EMBEDDING_KEYS)
_EMBEDDING_TABLE = _EMBEDDING + tuple(f"{key}.trellis" for key in _EMBEDDING_KEYS)
"""The token embedding as stored: fp16/bf16 ``.weight``, or (1.6.5 ``--embed_bits``) the
quantized row table ``.trellis``. Either stays in system RAM (modules/embedding.py:101)."""
_MARKERS = (".mcg", ".mul1")
"""Stored but never on the GPU: the codebook markers (loader/safetensors.py:638
``get_codebook_marker`` hands back a shared CPU tensor). Old folders' scalar ``scale`` is not
loaded either (modules/linear.py:445)."""
_PACKED_SIGNS = (".su", ".sv")


def _tensors(info: ModelInfo):
    for weight_file in sorted(info.path.glob(f"*{WEIGHT_SUFFIX}")):
        yield from read_safetensors_header(weight_file)


def gpu_bytes_of(tensor) -> int:
    """What one stored tensor of an EXL3 linear layer occupies once loaded on the GPU
    (modules/linear.py:435 ``load_exl3``, modules/quant/exl3.py ``LinearEXL3``): its storage,
    except codebook markers and ``scale`` (not loaded), packed ``su``/``sv`` sign bits of older
    folders (unpacked to one fp16 per bit: 16x), and a float32 bias (cast to fp16: half)."""
    name = tensor.name
    if name.endswith(_MARKERS) or (name.endswith(".scale") and not tensor.shape):
        return 0
    if name.endswith(_PACKED_SIGNS) and tensor.dtype == "I16":
        return tensor.nbytes * 16
    if name.endswith(".bias") and tensor.dtype == "F32":
        return tensor.nbytes // 2
    return tensor.nbytes


def weights_from_files(info: ModelInfo) -> ModelWeights:
    """Exact module sizes of an EXL3 folder, from the safetensors headers' storage sizes
    (what exllamav3 itself sums per module: Module.get_compile_sizes, and lists in
    quantization_config.json as ``stored_tensors``), less what loading leaves off the GPU
    (see :func:`gpu_bytes_of`); the embedding table is counted apart, in system RAM."""
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
            blocks[int(match.group(1))] += gpu_bytes_of(tensor)
        elif tensor.name in _EMBEDDING_TABLE:
            embedding += tensor.nbytes
        elif tensor.name.startswith(("lm_head.", "model.lm_head.")):
            head += gpu_bytes_of(tensor)
        else:
            norm += gpu_bytes_of(tensor)  # final norm; a quantized embedding's fp16 signs
    if not found:
        raise InvalidInputError(f"{info.path} has no *.safetensors files to measure.")
    if not head and arch.tie_word_embeddings:
        head = embedding  # llama.py: head_alt_key = "model.embed_tokens", fp16 on the GPU
    modules = [ModuleWeights(ModuleKind.ATTENTION, layer, size) for layer, size in enumerate(blocks)]
    modules += [ModuleWeights(ModuleKind.NORM, None, norm), ModuleWeights(ModuleKind.HEAD, None, head)]
    return ModelWeights(info.name, arch, tuple(modules), embedding, "files", info.quant.bits,
                        info.quant.head_bits, quant_format=EXL3)


def mtp_layers(info: ModelInfo) -> int:
    """The folder's MTP layers from its config.json (core.models.mtp_layers, as the tune
    reads them); 0 without MTP."""
    return models.mtp_layers(read_json(info.path / "config.json"))


def mtp_weights(info: ModelInfo) -> ModelWeights:
    """The MTP component of an EXL3 model as TabbyAPI main's ``draft_mode: mtp`` loads it:
    the ``mtp.*`` tensors (exact, from the files), its blocks with their own cache."""
    layers = mtp_layers(info)
    if layers == 0:
        raise InvalidInputError(
            f"{info.path.name} has no MTP layers (config.json sets neither "
            f"{' nor '.join(models.MTP_KEYS)}).",
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
            blocks[int(match.group(1))] += gpu_bytes_of(tensor)
        else:
            rest += gpu_bytes_of(tensor)  # mtp.fc, its norms, mtp.norm
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
    fp16 K/V temporaries, the largest rebuilt weight of a chunk's forward pass and its
    rotated input, the loader's open arena block, and that pass's activations. ExLlamaV2's
    manual-split bookkeeping has no ExLlamaV3 counterpart."""
    h, q_width, kv_width = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width
    linears = _block_linears(arch)
    rebuilt = max(2 * i * min(o, MAX_RECONSTRUCT_SLICE_N) for i, o in linears) if chunk > RECONSTRUCT_ROWS else 0
    fusable = all(i % 128 == 0 and o % 128 == 0 for i, o in linears)
    # 1.6.5: rows >= 1024 skip the xh copy when fusable; a shorter chunk (the last one of a
    # prompt) still makes it, so the worst case is 1023 rows.
    rotated_rows = min(chunk, FUSED_RECONSTRUCT_ROWS - 1) if fusable else chunk
    rotated = rotated_rows * max(i for i, _ in linears) * 2 + TENSOR_PAD
    activations = (chunk * 2 * (2 * h + 2 * q_width + 2 * kv_width)
                   + chunk * arch.intermediate_size * 4 * 2  # gate/up in float (interm_dtype)
                   + MAX_OUTPUT_ROWS * arch.vocab_size * 4)
    return ModelCosts(
        cache_per_layer=kv_bytes_per_token_layer(arch, mode) * tokens,
        cache_staging=0 if cache_bits(mode) is None else 2 * 2 * kv_width * tokens,
        scratch_fixed=rebuilt + rotated + ARENA_BLOCK,
        rope_tables=0,
        activations=activations,
        attention_scratch=0,
        mlp_scratch=0,
        head_scratch=0,
        attention_temp=0,
        split_constant=0,
    )


def tabby_chunk_size(chunk: int) -> int:
    """TabbyAPI main's adjust_chunk_size: at least a page (``PAGE_SIZE``), rounded up to a
    multiple of it (no clamp to max_seq_len, unlike its ExLlamaV2 backend)."""
    return -(-max(PAGE_SIZE, int(chunk)) // PAGE_SIZE) * PAGE_SIZE
