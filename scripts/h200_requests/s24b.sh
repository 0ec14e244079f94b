#!/bin/bash
# issue 16, twenty-fourth session (branch minb at .gitsha, docs/branches/minb.patch on main; after the staging
# calls): gate|up's and down's instances with their registers capped for 4 blocks of 256 threads an SM (MINB 4, the
# shape tuple's fourth element: gemv_split 64 registers instead of 78, 4 blocks an SM instead of 3; down 63 instead
# of 80, 8 blocks of 4 warps instead of 6).
# Their CUDA tests (bit-equal to the bound-free instances, the tiny step bit-equal), the step's timeline with both
# capped, and the replayed step across processes (h200_ab.py, 3 rounds) -> $OUT/h200_minb_ab_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
timeout 200 python3 -m pytest -m cuda tests/test_native_split_cuda.py tests/test_native_cuda.py -k "min_blocks" -q \
  -p no:cacheprovider -o addopts="" -rf 2>&1 | grep -v "plugin EP" | tee "$OUT/h200_minb_tests_$s7.txt" | tail -n 4 || exit 1
OUT="$OUT" timeout 200 python3 scripts/h200_native_timeline.py --shapes '{"gate_up": [8, 2, 3, 4], "down": [4, 1, 2, 4]}' \
  --tag minb4_$s7 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-300
OUT="$OUT" timeout 330 python3 scripts/h200_ab.py h200_minb_ab_$s7 \
  '{"base": {}, "gate_up4": {"NATIVE_SHAPES": {"gate_up": [8, 2, 3, 4]}}, "down4": {"NATIVE_SHAPES": {"down": [4, 1, 2, 4]}}}' \
  ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 11
