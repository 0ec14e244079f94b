#!/bin/bash
# issue 16, thirty-fourth session (main at .gitsha; after the 9 staging calls, the session's last ~5 min of device
# time): the pipeline bench at context 1024 (3 interleaved rounds, capacity context + 48), native beside
# onnxruntime-genai graph only: main's defaults again (staged q rows off since 5cdb63f; the last bench, 394d079's, had
# them on; 4096 left out to fit the time left) -> $OUT/h200_<sha>_native_bench_ctx1024_gemma3-1b.{csv,json}
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
timeout 270 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 \
  --modes native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --out "$OUT" \
  --tag h200_${s7}_native_bench_ctx1024_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 14 | cut -c1-300
