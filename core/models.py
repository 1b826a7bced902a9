"""The local model library: what a model folder holds, read without loading any weights.

A model folder is what ExLlamaV2 and transformers load: ``config.json``, weights in
``*.safetensors``, tokenizer files. EXL2 quantizations add a ``quantization_config`` block to
config.json (``quant_method: exl2``, ``bits``, ``head_bits``; written by exllamav2's
converter). Safetensors files start with a JSON header listing every tensor's dtype, shape
and byte range, so per-layer sizes are exact and cost a few kilobytes of reading.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.exl2_facts import NATIVE_CONTEXT_DEFAULT
from specdeck.core.printable import printable
from specdeck.core.units import MiB
from specdeck.core.userpath import expand_user

log = logging.getLogger(__name__)

WEIGHT_SUFFIX = ".safetensors"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
)

# Bytes per element of the safetensors dtypes.
DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}

_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# Names of the input embedding and the output head across the families ExLlamaV2 runs.
_EMBEDDING_NAMES = ("model.embed_tokens.weight", "transformer.wte.weight", "embed_tokens.weight")
_HEAD_PREFIXES = ("lm_head.", "output.")

# Upper bound on a safetensors header; real ones are well under 1 MiB even for 70B models.
_MAX_HEADER_BYTES = 100 * MiB


@dataclass(frozen=True)
class Architecture:
    """The numbers from config.json that size a model."""

    model_type: str
    architectures: tuple[str, ...]
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    num_experts: int = 1
    torch_dtype: str | None = None
    rope_theta: float | None = None
    rope_scaling: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    softcaps_attention: bool = False
    """config.json's ``attn_logit_softcapping`` (Gemma 2): ExLlamaV2 then attends through its
    matmul branch whenever flash-attn is off, which holds a whole chunk's scores."""

    @property
    def kv_width(self) -> int:
        """E = num_key_value_heads x head_dim: the per-token width of K (and of V)."""
        return self.num_kv_heads * self.head_dim

    def estimated_parameters(self) -> int:
        """Parameter count from the shapes (dense or MoE with gated MLPs)."""
        h = self.hidden_size
        attention = h * self.num_heads * self.head_dim * 2 + h * self.kv_width * 2
        mlp = 3 * h * self.intermediate_size * max(1, self.num_experts)
        router = h * self.num_experts if self.num_experts > 1 else 0
        per_layer = attention + mlp + router + 2 * h
        embedding = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.num_layers * per_layer + embedding + head + h


@dataclass(frozen=True)
class Quantization:
    """How the weights are stored. ``method`` is e.g. "exl2", "exl3", "gptq" or "none"."""

    method: str
    bits: float | None = None
    head_bits: int | float | None = None
    version: str | None = None

    @property
    def label(self) -> str:
        if self.method == "none":
            return "unquantized"
        if self.bits is None:
            return self.method.upper()
        head = f" h{self.head_bits:g}" if self.head_bits else ""
        return f"{self.method.upper()} {self.bits:g} bpw{head}"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class WeightSizes:
    """Bytes of the weight files, split the way the engines place them."""

    total: int
    embedding: int
    head: int
    layers: tuple[int, ...]
    other: int

    @property
    def on_gpu(self) -> int:
        """ExLlamaV2 keeps the token embedding in system RAM; everything else goes to VRAM."""
        return self.total - self.embedding


@dataclass(frozen=True)
class ModelInfo:
    """Everything SpecDeck knows about a model folder without loading it."""

    path: Path
    arch: Architecture
    quant: Quantization
    weights: WeightSizes | None
    tokenizer_files: tuple[str, ...]
    files_bytes: int
    parameters: int

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_exl2(self) -> bool:
        return self.quant.method == "exl2"

    @property
    def context_length(self) -> int:
        return self.arch.max_position_embeddings

    @property
    def parameters_label(self) -> str:
        return format_parameters(self.parameters)


def format_parameters(count: int) -> str:
    if count >= 1_000_000_000:
        return f"{count / 1e9:.1f}B"
    return f"{count / 1e6:.0f}M"


def read_json(path: Path, limit: int | None = None) -> dict[str, Any]:
    """A JSON object from ``path`` (a model's config.json, read up to its cap,
    ``core.files.MODEL_CONFIG``, unless ``limit`` says another), with errors a user can act
    on."""
    from specdeck.core.files import MODEL_CONFIG, read_text_bounded

    try:  # bounded: a FIFO or /dev/zero named config.json must not hang or fill memory
        data = json.loads(read_text_bounded(path, "model file", limit or MODEL_CONFIG))
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).",
            "Re-download the file or fix it by hand.",
        ) from exc
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path} should hold a JSON object, not {type(data).__name__}.")
    return data


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    # Multimodal checkpoints nest the language model's numbers under text_config.
    nested = config.get("text_config")
    if isinstance(nested, Mapping) and "hidden_size" in nested and "hidden_size" not in config:
        return nested
    return config


MTP_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")
"""config.json keys that count a model's multi-token-prediction layers: Qwen3.5's
(exllamav3 architecture/qwen3_5_mtp.py reads ``mtp_num_hidden_layers``) and DeepSeek V3's,
GLM-4.5's, MiMo's (``num_nextn_predict_layers``)."""


def mtp_layers(config: Mapping[str, Any]) -> int:
    """A model folder's MTP layers from its parsed config.json (its text_config first, then
    the top level; either key of :data:`MTP_KEYS`), 0 without: the one reading the tune's
    TabbyAPI candidates (core.tune.tabby) and the EXL3 VRAM plan (core.vram.exl3) share."""
    nested = config.get("text_config")
    for source in (nested if isinstance(nested, Mapping) else {}, config):
        for key in MTP_KEYS:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


# Families whose transformers config class defaults tie_word_embeddings to True, so their
# config.json often leaves it out (Gemma 2 9B: tied, 9.24B parameters).
_TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3", "gemma3_text")


def _ties_by_default(config: Mapping[str, Any]) -> bool:
    return str(config.get("model_type", "")) in _TIED_BY_DEFAULT


def architecture_from_config(config: Mapping[str, Any], source: str = "config.json") -> Architecture:
    """The sizing numbers of a config.json dict."""
    c = _text_config(config)
    missing = [k for k in ("hidden_size", "num_hidden_layers", "vocab_size") if k not in c]
    if missing:
        raise InvalidInputError(
            f"{source} lacks {', '.join(missing)}: it does not describe a transformer "
            "language model SpecDeck can size."
        )
    def whole(key: str, default: int | None = None) -> int:
        return _whole_number(c, key, source, default)

    hidden = whole("hidden_size")
    heads = whole("num_attention_heads", 1)
    kv_heads = whole("num_key_value_heads", heads)
    head_dim = whole("head_dim", max(1, hidden // heads))
    experts = whole("num_local_experts", None) if c.get("num_local_experts") else \
        whole("num_experts", 1)
    intermediate = whole("moe_intermediate_size") if experts > 1 and c.get("moe_intermediate_size") \
        else whole("intermediate_size", 4 * hidden)
    rope_theta = c.get("rope_theta")
    if rope_theta is not None and (isinstance(rope_theta, bool)
                                   or not isinstance(rope_theta, (int, float))
                                   or not math.isfinite(rope_theta) or rope_theta <= 0):
        raise InvalidInputError(f"{source}: rope_theta is {rope_theta!r}; it must be a "
                                "positive number.", "Fix or re-download config.json.")
    architectures = tuple(str(a) for a in (config.get("architectures") or ()))
    return Architecture(
        model_type=str(c.get("model_type") or config.get("model_type") or "unknown"),
        architectures=architectures,
        hidden_size=hidden,
        num_layers=whole("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=whole("vocab_size"),
        max_position_embeddings=_native_context(c, config),
        tie_word_embeddings=bool(
            c.get("tie_word_embeddings", config.get("tie_word_embeddings", _ties_by_default(c)))
        ),
        num_experts=experts,
        torch_dtype=c.get("torch_dtype") or c.get("dtype"),
        rope_theta=float(rope_theta) if rope_theta is not None else None,
        rope_scaling=c.get("rope_scaling") if isinstance(c.get("rope_scaling"), Mapping) else None,
        softcaps_attention=_positive_number(c.get("attn_logit_softcapping")),
    )


def _positive_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


# Upper bounds far above any real model (Llama 3.1 405B: 126 layers, 16384 hidden, 128256
# vocabulary), so that a corrupt or hostile config.json is refused before any arithmetic
# sized by it runs.
CONFIG_LIMITS = {
    "hidden_size": 1 << 20,
    "num_hidden_layers": 1024,
    "num_attention_heads": 4096,
    "num_key_value_heads": 4096,
    "head_dim": 1 << 16,
    "num_local_experts": 4096,
    "num_experts": 4096,
    "intermediate_size": 1 << 24,
    "moe_intermediate_size": 1 << 24,
    "vocab_size": 1 << 24,
}
MAX_CONTEXT = 1 << 27
"""The longest context SpecDeck reads from a model or takes from a user (a config.yml's
max_seq_len, ``--ctx``, ``--max-seq-len``, the GPUs and Compatibility pages): 128 Mi tokens,
beyond any model's; a larger number is a typo, or a file that is not what it claims."""


def _whole_number(config: Mapping[str, Any], key: str, source: str, default: int | None) -> int:
    value = config.get(key)
    if value is None:
        if default is None:
            raise InvalidInputError(f"{source} lacks {key}.", "Fix or re-download config.json.")
        return default
    limit = CONFIG_LIMITS.get(key, 1 << 30)
    ok = (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if not ok or not 1 <= value <= limit:
        shown = repr(value) if len(repr(value)) < 40 else repr(value)[:37] + "..."
        raise InvalidInputError(
            f"{source}: {key} is {shown}; it must be a whole number from 1 to {limit:,}.",
            "Fix or re-download config.json.")
    return int(value)


# The keys ExLlamaV2 reads a model's native context from, in its order (config.py), each
# looked up in text_config first for multimodal configs.
_CONTEXT_KEYS = ("max_sequence_length", "model_max_length", "max_position_embeddings",
                 "max_seq_len", "n_positions")


def _native_context(text: Mapping[str, Any], config: Mapping[str, Any]) -> int:
    for key in _CONTEXT_KEYS:
        for source in (text, config):
            value = source.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 \
                    and math.isfinite(value):
                return int(min(value, MAX_CONTEXT))
    return NATIVE_CONTEXT_DEFAULT


def _head_bits(value: Any) -> int | float | None:
    """quantization_config's head_bits: an int (EXL2; EXL3's 1-8 or 16), or one of EXL3's
    half-integer rates (exllamav3 1.6.5's converter: 1.5, 2.5, 3.5), kept as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if float(value).is_integer() else float(value)


def quantization_from_config(config: Mapping[str, Any]) -> Quantization:
    q = config.get("quantization_config")
    if not isinstance(q, Mapping):
        return Quantization("none")
    method = str(q.get("quant_method") or "unknown").lower()
    bits = q.get("bits")
    head_bits = q.get("head_bits")
    return Quantization(
        method=method,
        bits=float(bits) if isinstance(bits, (int, float)) else None,
        head_bits=_head_bits(head_bits),
        version=str(q["version"]) if q.get("version") is not None else None,
    )


def read_safetensors_header(path: Path) -> list[TensorInfo]:
    """The tensors listed in a .safetensors file's header (the weights are not read). A
    FIFO, a folder or a device named *.safetensors is refused, not waited on or read."""
    from specdeck.core.files import open_regular_file

    try:
        with open_regular_file(path, "safetensors file",
                               hint="Re-download the model's .safetensors files.") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise InvalidInputError(f"{path} is truncated: no safetensors header.")
            (length,) = struct.unpack("<Q", prefix)
            if length > _MAX_HEADER_BYTES:
                raise InvalidInputError(f"{path} is not a safetensors file (header too large).")
            header = json.loads(handle.read(length))
            data_bytes = os.fstat(handle.fileno()).st_size - 8 - length
    except (OSError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"Cannot read the safetensors header of {path}: {exc}.") from exc
    if not isinstance(header, Mapping):
        raise InvalidInputError(f"{path}'s safetensors header is not a table of tensors.")
    tensors = []
    for name, entry in header.items():
        if name == "__metadata__" or not isinstance(entry, Mapping):
            continue
        offsets, shape = entry.get("data_offsets", (0, 0)), entry.get("shape", ())
        problem = _tensor_problem(offsets, shape, data_bytes)
        if problem:
            shown = printable(name)[:80]
            raise InvalidInputError(f"{path}: tensor {shown}'s {problem}: not a safetensors "
                                    "header SpecDeck can take sizes from.",
                                    "Re-download the model's .safetensors files.")
        tensors.append(TensorInfo(name, str(entry.get("dtype")), tuple(shape),
                                  offsets[1] - offsets[0]))
    return tensors


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor_problem(offsets: Any, shape: Any, data_bytes: int) -> str:
    """What is impossible about one tensor's entry ("" when nothing): its data_offsets must
    be two whole numbers, the second not before the first, within the file's data (the
    safetensors format: begin and end of its bytes after the header); its shape whole
    numbers. Reversed offsets once made negative weights that "fit" any GPU."""
    if not isinstance(offsets, (list, tuple)) or len(offsets) != 2 \
            or not all(_count(v) for v in offsets):
        return f"data_offsets {printable(offsets)[:60]} are not two byte positions"
    if offsets[1] < offsets[0]:
        return f"data_offsets {list(offsets)} end before they begin"
    if offsets[1] > data_bytes:
        return f"data_offsets {list(offsets)} reach past the end of the file"
    if not isinstance(shape, (list, tuple)) or not all(_count(d) for d in shape):
        return f"shape {printable(shape)[:60]} is not a list of sizes"
    return ""


def weight_sizes(tensors: Iterable[TensorInfo], num_layers: int) -> WeightSizes:
    layers = [0] * num_layers
    total = embedding = head = other = 0
    for t in tensors:
        total += t.nbytes
        match = _LAYER_RE.search(t.name)
        if match and int(match.group(1)) < num_layers:
            layers[int(match.group(1))] += t.nbytes
        elif t.name in _EMBEDDING_NAMES:
            embedding += t.nbytes
        elif t.name.startswith(_HEAD_PREFIXES):
            head += t.nbytes
        else:
            other += t.nbytes
    return WeightSizes(total, embedding, head, tuple(layers), other)


def _parameters_from_tensors(tensors: list[TensorInfo]) -> int:
    count = 0
    for t in tensors:
        n = 1
        for d in t.shape:
            n *= d
        count += n
    return count


def read_model(folder: str | Path) -> ModelInfo:
    """Describe the model in ``folder``. Raises NotFoundError / InvalidInputError."""
    path = expand_user(folder)
    if path.is_file():
        raise InvalidInputError(
            f"{path} is a file; SpecDeck reads a model from its folder.",
            f"Pick the folder that holds config.json{' (this file is in ' + str(path.parent) + ')' if path.name == 'config.json' else ''}.")
    if not path.is_dir():
        raise NotFoundError(
            f"Model folder {path} does not exist.", "Pick the folder that holds config.json."
        )
    config_path = path / "config.json"
    if not config_path.is_file():
        raise InvalidInputError(
            f"{path} has no config.json, so it is not a model folder.",
            "Pick the folder that holds config.json and the *.safetensors files.",
        )
    config = read_json(config_path)
    arch = architecture_from_config(config, str(config_path))
    quant = quantization_from_config(config)

    weight_files = sorted(path.glob(f"*{WEIGHT_SUFFIX}"))
    tensors: list[TensorInfo] = []
    for weight_file in weight_files:
        tensors.extend(read_safetensors_header(weight_file))
    sizes = weight_sizes(tensors, arch.num_layers) if tensors else None
    if tensors and quant.method == "none":
        parameters = _parameters_from_tensors(tensors)
    else:
        parameters = arch.estimated_parameters()

    files_bytes = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    tokenizer_files = tuple(name for name in TOKENIZER_FILES if (path / name).is_file())
    return ModelInfo(
        path=path,
        arch=arch,
        quant=quant,
        weights=sizes,
        tokenizer_files=tokenizer_files,
        files_bytes=files_bytes,
        parameters=parameters,
    )


@dataclass(frozen=True)
class ScanProblem:
    """A folder that looked like a model but could not be read."""

    path: Path
    reason: str


def scan_models(
    directories: Iterable[str | Path], max_depth: int = 2
) -> tuple[list[ModelInfo], list[ScanProblem]]:
    """Every model folder (a folder with config.json) under ``directories``.

    TabbyAPI expects models directly inside model_dir; one more level is searched so that
    folders such as ``models/drafts/<name>`` are found too. Hidden and staging folders
    (names starting with ".") are skipped.
    """
    found: list[ModelInfo] = []
    problems: list[ScanProblem] = []
    seen: set[Path] = set()

    def visit(folder: Path, depth: int) -> None:
        try:
            real = folder.resolve()
        except OSError:
            return
        if real in seen:
            return
        seen.add(real)
        if (folder / "config.json").is_file():
            try:
                found.append(read_model(folder))
            except (NotFoundError, InvalidInputError) as exc:
                problems.append(ScanProblem(folder, str(exc)))
            return
        if depth >= max_depth:
            return
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir())
        except OSError as exc:
            problems.append(ScanProblem(folder, f"cannot list: {exc.strerror or exc}"))
            return
        for child in children:
            if not child.name.startswith("."):
                visit(child, depth + 1)

    for directory in directories:
        root = expand_user(directory)
        if root.is_dir():
            visit(root, 0)
    found.sort(key=lambda m: m.name.lower())
    return found, problems
