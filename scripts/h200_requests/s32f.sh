#!/bin/bash
# issue 16, thirty-second session (main at .gitsha, attn_stage_q the head_dim-256 default; right after s32e.sh,
# < 7 min): the pipeline bench at contexts 1024 and 4096 in one run (3 interleaved rounds, capacity 4144), native
# beside graph, device and onnxruntime-genai graph, as s31b.sh ran it on b5646b5
# -> $OUT/h200_<sha>_native_bench_ctx1024_4096_gemma3-1b.{csv,json}
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
timeout 420 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 4096 \
  --modes graph device native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --out "$OUT" \
  --tag h200_${s7}_native_bench_ctx1024_4096_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 14 | cut -c1-300
