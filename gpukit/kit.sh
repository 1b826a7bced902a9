#!/usr/bin/env bash
# The GPU proof kit's one command (docs/gpu-proof.md). Run it on the device machine with
# carry [".whl", ".gpukit"], again and again, until it prints ALL STEPS DONE. Each call runs
# the pending steps for at most KIT_BUDGET seconds (default 540: the device allows 600 per
# command) and leaves the report, the trace and the logs in $OUT.
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
exec "$PY" -m gpukit next --preset "${KIT_PRESET:-gpu}" --budget "${KIT_BUDGET:-540}" --out "$OUT_DIR"
