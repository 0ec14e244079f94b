#!/bin/bash
# issue 16, thirty-sixth session, call 1 (main at .gitsha, cold machine; CuPy only, with the first wheel part):
# h200_tiled_gemv_probe.py again (the thirty-fifth session's files were lost with its machine before they were
# committed) -> $OUT/h200_tiled_gemv_probe_<sha>.json
set -o pipefail
mkdir -p "$OUT" /root/parts && cp .gpu/qpart00/* /root/parts/
export PYTHONPATH=$PWD VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
OUT="$OUT" timeout 400 python3 scripts/h200_tiled_gemv_probe.py 2>&1 | tail -n 30 | cut -c1-400
mv "$OUT/h200_tiled_gemv_probe.json" "$OUT/h200_tiled_gemv_probe_$s7.json"
