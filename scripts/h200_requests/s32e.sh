#!/bin/bash
# issue 16, thirty-second session (main at .gitsha, attn_stage_q the head_dim-256 default; after the 9 staging calls,
# < 8 min): every CUDA test on main (final_tests.sh) -> $OUT/h200_gpu_test_log_<sha>.txt, $OUT/h200_gpu_tests_<sha>.xml
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
timeout 560 bash scripts/h200_requests/final_tests.sh
mv "$OUT/h200_gpu_test_log.txt" "$OUT/h200_gpu_test_log_$s7.txt"; mv "$OUT/h200_gpu_tests.xml" "$OUT/h200_gpu_tests_$s7.xml"
