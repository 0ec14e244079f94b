#!/bin/bash
# issue 16, thirty-fifth session (main at .gitsha, gate|up as gemv_tiled by default; after the 9 staging calls;
# < 4 min): the pipeline bench at context 1024, then at 4096 (each its own process, 3 interleaved rounds, capacity
# context + 48), native beside onnxruntime-genai graph -> $OUT/h200_<sha>_native_bench_ctx{1024,4096}_gemma3-1b.*
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
for c in 1024 4096; do
  timeout 200 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts $c \
    --modes native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --out "$OUT" \
    --tag h200_${s7}_native_bench_ctx${c}_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 4 | cut -c1-300
done
