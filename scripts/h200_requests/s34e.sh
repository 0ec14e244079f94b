#!/bin/bash
# issue 16, thirty-fourth session (run inline right after s34d.sh on the same warm machine, the same tree; this file
# records the command): the bench at context 4096 (3 interleaved rounds, capacity context + 48), native beside
# onnxruntime-genai graph -> $OUT/h200_<sha>_native_bench_ctx4096_gemma3-1b.{csv,json}
. scripts/h200_requests/preamble.sh && timeout 150 python3 -m vlmdecode.cli bench run --presets gemma3-1b \
  --devices cuda --contexts 4096 --modes native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 \
  --out "$OUT" --tag h200_${s7}_native_bench_ctx4096_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-300
