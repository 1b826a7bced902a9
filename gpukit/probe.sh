#!/usr/bin/env bash
# The short GPU probe (gpukit/probe.py): about a minute on a device machine, with
# carry [".whl", ".gpukit"] (.gpukit/ext holding the xz parts of a built exllamav2_ext, so
# nothing compiles). Writes probe.json to $OUT. `bash gpukit/probe.sh --cpu` rehearses it here.
set -uo pipefail
cd "$(dirname "$0")/.."
export SPECDECK_GPU_WORK="${SPECDECK_GPU_WORK:-/tmp/specdeck-probe}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-$SPECDECK_GPU_WORK/out}"
mkdir -p "$SPECDECK_GPU_WORK" "$OUT_DIR"
flags=("$@")
if [[ " ${flags[*]} " != *" --cpu "* ]]; then
    "$PY" -c "from pathlib import Path; from gpukit.install import install; \
print(install(Path('$SPECDECK_GPU_WORK/site'), Path('.whl'), Path('.'), Path('$SPECDECK_GPU_WORK/pip.log')))" \
        || { cat "$SPECDECK_GPU_WORK/pip.log"; exit 1; }
    export PYTHONPATH="$SPECDECK_GPU_WORK/site${PYTHONPATH:+:$PYTHONPATH}"
    prebuilt="$("$PY" -m gpukit restore-ext)" && export PYTHONPATH="$prebuilt:$PYTHONPATH"
    # A prebuilt extension that does not import would make exllamav2 compile (minutes).
    if ! "$PY" -c "import torch, exllamav2_ext" 2>"$OUT_DIR/ext-import.txt"; then
        flags+=(--no-exllamav2)
    fi
fi
exec "$PY" -m gpukit.probe --out "$OUT_DIR" "${flags[@]}"
