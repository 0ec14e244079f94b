#!/bin/bash
# issue 16, thirty-fourth session (main at .gitsha; after the 9 staging calls, the session's last ~5 min of device
# time): the pipeline bench at contexts 1024 and 4096 in one run (3 interleaved rounds, capacity 4144), native beside
# onnxruntime-genai graph only: main's defaults again (staged q rows off since 5cdb63f; the last bench, 394d079's, had
# them on) -> $OUT/h200_<sha>_native_bench_ctx1024_4096_gemma3-1b.{csv,json}
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
timeout 300 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 4096 \
  --modes native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --out "$OUT" \
  --tag h200_${s7}_native_bench_ctx1024_4096_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 14 | cut -c1-300
