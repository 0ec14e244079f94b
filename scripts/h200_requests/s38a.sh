#!/bin/bash
# issue 16, for the thirty-eighth session's first call after the 9 staging calls (main at .gitsha; < 7.5 min): every
# CUDA test as final_tests.sh runs them, first (the thirty-seventh session's s37c.sh reached the bench but not the
# suite at gate|up R 16), now with qkv's tiled fold (EPI_FOLD: its kernel against float64, the captured step's
# tokens) among them -> $OUT/h200_gpu_test_log.txt, $OUT/h200_gpu_tests.xml
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
timeout 430 bash scripts/h200_requests/final_tests.sh
