#!/bin/bash
# issue 16, for the fortieth session after s40b.sh (< 8 min): every CUDA test at main's default (qkv and o tiled;
# the o (16, 8, 0) step test among them) -> $OUT/h200_gpu_test_log.txt, $OUT/h200_gpu_tests.xml
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
timeout 450 bash scripts/h200_requests/final_tests.sh
