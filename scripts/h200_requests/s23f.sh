#!/bin/bash
# issue 16, session 23 (main at .gitsha, gate|up (8, 2, 3) the default; after the 7 staging calls): the
# native decoder's CUDA tests (test_native_cuda.py's decoder tests: tokens equal to onnxruntime over 200 steps on the
# tiny fixture's three layouts, the bounded head, sampling, counters, PDL, memory) and gemv_split's, with the new
# default -> $OUT/h200_gate_up_split_native_tests_<sha>.txt.
set -o pipefail
. scripts/h200_requests/preamble.sh
timeout ${T:-200} python3 -m pytest -m cuda tests/test_native_cuda.py tests/test_native_split_cuda.py -k "native_ or split" \
  -q -p no:cacheprovider -o addopts="" -rf 2>&1 | grep -v "plugin EP" | tee "$OUT/h200_gate_up_split_native_tests_$s7.txt" \
  | tail -n 6
