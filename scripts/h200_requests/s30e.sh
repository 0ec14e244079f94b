#!/bin/bash
# issue 16, thirtieth session (main at .gitsha; after the 9 staging calls, < 1 min): the capped-grid GEMV test as
# fixed after s30d.sh (its device arrays kept referenced) -> $OUT/h200_gemv_cap_tests_<sha>.txt
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/h200_gemv_cap_tests_$s7.txt"
timeout 60 python3 -m pytest -m cuda -q -p no:cacheprovider -o addopts="" -rf tests/test_native_cuda.py \
  -k "capped_grids" 2>&1 | grep -v "plugin EP" >> "$OUT/h200_gemv_cap_tests_$s7.txt"
tail -n 2 "$OUT/h200_gemv_cap_tests_$s7.txt"
