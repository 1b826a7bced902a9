"""llama-swap configs the swap tests share: a user's file as found in the wild, and the
check that a config still validates against llama-swap's own config-schema.json."""

from __future__ import annotations

import json

import jsonschema
from conftest import FIXTURES
from specdeck.core.config.document import parse_values

SWAP = FIXTURES / "llama-swap"

# A user's file as found in the wild: last year's guide (the llama-swap tuning table's
# Qwen2.5-Coder-32B with a 0.5B draft), a comment inside the cmd, trailing blanks, a macro,
# and a single-line cmd.
USER = """\
# my llama-swap box: 3090 + P40s
healthCheckTimeout: 500

macros:
  "llama": /opt/llama.cpp/build/bin/llama-server --port ${PORT} -ngl 99

models:
  # Qwen2.5-Coder-32B with a 0.5B draft (33.9 -> 83.6 tok/s in my tuning table)
  "qwen-coder-32b":
    cmd: |
      ${llama}
      -m /models/Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf
      -md /models/Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf   
      --draft-max 16 --draft-min 4
      # the draft goes on the P40
      --device-draft CUDA1 -ngld 99
      --flash-attn --metrics
      -c 16384
    ttl: 300

  "llama-8b":
    cmd: /opt/llama.cpp/build/bin/llama-server --port ${PORT} -m /models/Llama-3.1-8B-Q4_K_M.gguf -md /models/Llama-3.2-1B-Q8_0.gguf --draft-max 8
"""


def schema_ok(text: str) -> None:
    schema = json.loads((SWAP / "config-schema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(parse_values(text))  # its $schema: draft-07


def tune_config(folder, llama_bin, gguf, drafting: str = ""):
    """A llama-swap config.yaml for the tune tests: the demo GGUF served by the pinned
    llama-server as model "smol" (with ``drafting`` flags, if any), and a model that is not a
    llama-server ("remote"), which tuning must name and refuse."""
    config = folder / "config.yaml"
    config.write_text(
        "# my llama-swap setup\n"
        "models:\n"
        "  smol:\n"
        f"    cmd: {llama_bin} --port ${{PORT}} -m {gguf} -t 1 -c 1024 {drafting}\n"
        "  remote:\n"
        "    cmd: python -m http.server ${PORT}\n",
        encoding="utf-8")
    return config

