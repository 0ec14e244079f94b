#!/bin/bash
# issue 16, prepared in the twenty-seventh session for the next (main at .gitsha; after the staging calls, < 8 min): the
# context-4096 part of h200_native.py (native / device / graph per token, the 0.80 ms target; as s15c.sh)
# -> $OUT/h200_native_proof_ctx4096_<sha>.json, then every CUDA test with GPU coverage (final_tests.sh)
# -> $OUT/h200_gpu_test_log.txt, h200_gpu_tests.xml.
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT/ctx"
OUT="$OUT/ctx" timeout 200 python3 scripts/h200_native.py --parts provenance,timing_gemma3_1b_ctx4096 2>&1 \
  | grep -v "plugin EP" | tail -n 4 | cut -c1-400
mv "$OUT/ctx/h200_native.json" "$OUT/h200_native_proof_ctx4096_$s7.json" 2>/dev/null
timeout 300 bash scripts/h200_requests/final_tests.sh
