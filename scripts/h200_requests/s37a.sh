#!/bin/bash
# issue 16, for the thirty-seventh session's first call after the 9 staging calls (main at .gitsha; < 9 min): at the
# tiled-down default (7571b27 on), what the thirty-sixth session could not run: the bench at 1024 and 4096 (native
# beside onnxruntime-genai graph, 3 interleaved rounds, one process a context), then every CUDA test as
# final_tests.sh runs them -> $OUT/h200_<sha>_native_bench_ctx{1024,4096}_gemma3-1b.*, $OUT/h200_gpu_test_log.txt,
# $OUT/h200_gpu_tests.xml
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
for c in 1024 4096; do
  timeout 150 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts $c \
    --modes native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --out "$OUT" \
    --tag h200_${s7}_native_bench_ctx${c}_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-300
done
timeout 400 bash scripts/h200_requests/final_tests.sh
