#!/usr/bin/env bash
# The GPU proof kit's one command (docs/gpu-proof.md). Run it once on the device machine with
# carry [".whl", ".gpukit"] and timeout_s 540: it runs every step within KIT_BUDGET seconds
# (default 480, so that one command and the machine's start fit the 15 minutes of device
# time a session has, with room for a short rerun), the extension build in the background
# while the pair trains, and writes the report, the trace and the logs to $OUT after every
# step. A second call continues what is left (a rerun after a fix, on a warm machine).
set -uo pipefail
cd "$(dirname "$0")/.."
export SPECDECK_GPU_WORK="${SPECDECK_GPU_WORK:-/tmp/specdeck-gpu}"
export PYTHONPATH="$SPECDECK_GPU_WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
# torch's JIT build runs `ninja` and `nvcc`: the interpreter's own bin folder (a venv's,
# where the ninja package puts its binary) comes first on PATH.
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
export PATH
OUT_DIR="${OUT:-$SPECDECK_GPU_WORK/out}"
mkdir -p "$SPECDECK_GPU_WORK" "$OUT_DIR"
# A carried extension build (.gpukit/ext, from an earlier session's $OUT) spares a cold
# machine the compile: ExLlamaV2 imports a prebuilt exllamav2_ext before trying to build.
if ls .gpukit/ext/*.parts.json >/dev/null 2>&1; then
    prebuilt="$("$PY" -m gpukit restore-ext)" && export PYTHONPATH="$prebuilt:$PYTHONPATH"
fi
exec "$PY" -m gpukit next --preset "${KIT_PRESET:-gpu}" --budget "${KIT_BUDGET:-480}" --out "$OUT_DIR"
