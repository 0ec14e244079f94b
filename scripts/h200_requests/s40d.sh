#!/bin/bash
# issue 16, for the fortieth session's second machine (after the 9 staging calls; the first went cold before s40c.sh):
# every CUDA test when FULL=1 (final_tests.sh, as s40c.sh), else the native decoder's CUDA tests only (its kernels,
# the captured step at main's default with qkv and o tiled, its prefill, split and flat8 variants), when the device
# time left is short of the whole suite (-v: a run cut short still names every test it finished) -> $OUT/h200_gpu_test_log.txt, $OUT/h200_gpu_tests.xml
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
if [ "${FULL:-0}" = 1 ]; then timeout "${LIMIT:-450}" bash scripts/h200_requests/final_tests.sh; exit; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
timeout "${LIMIT:-330}" python3 -m pytest -m cuda tests/test_native_cuda.py tests/test_native_split_cuda.py \
  tests/test_native_flat8_cuda.py tests/test_native_prefill_cuda.py -v -p no:cacheprovider -o addopts="" -rf \
  --junitxml="$OUT/h200_gpu_tests.xml" 2>&1 | grep --line-buffered -v "plugin EP" | cat /tmp/gpu_info.txt - \
  > "$OUT/h200_gpu_test_log.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/h200_gpu_test_log.txt" | tail -30
