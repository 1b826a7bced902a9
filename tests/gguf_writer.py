"""Small GGUF files written with the gguf package from real tokenizer and config files: the
header llama.cpp's converter (convert_hf_to_gguf.py) writes for a vocabulary (with the BPE
merges llama.cpp requires of a "gpt2" tokenizer) and the model's hyperparameters, and no
weights (one token embedding column, so the file says how many rows its output head has)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _merges(folder: Path) -> list[str]:
    """The BPE merges of a tokenizer folder, as "left right" strings (merges.txt, else
    tokenizer.json's model.merges); [] when it has none (a tiktoken-only folder)."""
    text = folder / "merges.txt"
    if text.is_file():
        return [line for line in text.read_text(encoding="utf-8").splitlines()
                if line and not line.startswith("#version")]
    for name in ("tokenizer.json", "tokenizer.derived.json"):
        if (folder / name).is_file():
            merges = json.loads((folder / name).read_text(encoding="utf-8"))["model"].get("merges")
            return [m if isinstance(m, str) else " ".join(m) for m in merges or ()]
    return []


def write_tokenizer_gguf(folder: Path, out: Path, *, context: int = 32768,
                         head_rows: int | None = None, columns: int = 1,
                         uint32s: dict[str, int] | None = None) -> Path:
    """``uint32s``: more header fields (e.g. ``llama.nextn_predict_layers``)."""
    import gguf

    from specdeck.core.compat.load import load_model

    side = load_model(folder)
    vocab, special = side.vocab, side.special
    texts = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(vocab.texts)]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_context_length(context)
    for key, value in (uint32s or {}).items():
        writer.add_uint32(key, value)
    # The hyperparameters llama.cpp requires of a model (src/llama-model.cpp load_hparams).
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config.get("num_key_value_heads", config["num_attention_heads"]))
    writer.add_tokenizer_model("gpt2" if vocab.byte_level else "llama")
    writer.add_token_list(texts)
    types = [gguf.TokenType.CONTROL if i in vocab.special_ids else gguf.TokenType.NORMAL
             for i in range(len(texts))]
    writer.add_token_types(types)
    if vocab.byte_level:
        writer.add_token_merges(_merges(folder))
    for key, sourced in (("bos", special.bos_id), ("eos", special.eos_id)):
        if isinstance(sourced.value, int):
            getattr(writer, f"add_{key}_token_id")(sourced.value)
    writer.add_add_bos_token(bool(special.add_bos.value))
    writer.add_add_eos_token(bool(special.add_eos.value))
    if special.chat_template:
        writer.add_chat_template(special.chat_template)
    rows = head_rows or len(texts)
    writer.add_tensor("token_embd.weight", np.zeros((rows, columns), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
