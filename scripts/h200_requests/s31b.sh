#!/bin/bash
# issue 16, thirty-first session (main at .gitsha; after the 9 staging calls, < 6 min): the pipeline bench at contexts
# 1024 and 4096 in one run (3 interleaved rounds; capacity context + 48 each). s31a.sh's h200_native.py parts gave
# 0.812 / 0.833 ms per token (h200_native_proof_ctx1024_4096_cc5909f.json) where the bench CLI gave 0.797-0.800 at 1024:
# this puts both contexts, and onnxruntime-genai graph beside them, on the bench's own loop
# -> $OUT/h200_<sha>_native_bench_ctx1024_4096_gemma3-1b.{csv,json}
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
timeout 420 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 4096 \
  --modes graph device native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --out "$OUT" \
  --tag h200_${s7}_native_bench_ctx1024_4096_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 14 | cut -c1-300
