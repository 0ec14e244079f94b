#!/bin/bash
# issue 16, for the fortieth session after s40a.sh (< 8 min): the bench at main's default (qkv and o tiled since the
# thirty-ninth session), native beside onnxruntime-genai graph, 3 interleaved rounds, one process a context; then
# the step's timeline at that default -> $OUT/h200_<sha>_native_bench_ctx{1024,4096}_gemma3-1b.*,
# $OUT/h200_native_timeline_qkvo16_<sha>.json (TIMELINE=0: the bench only)
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
for c in 1024 4096; do
  timeout 160 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts $c \
    --modes native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --out "$OUT" \
    --tag h200_${s7}_native_bench_ctx${c}_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-300
done
[ "${TIMELINE:-1}" = 0 ] || OUT="$OUT" timeout 100 python3 scripts/h200_native_timeline.py --tag qkvo16_$s7 2>&1 | grep -v "plugin EP" | tail -n 2 \
  | cut -c1-900
