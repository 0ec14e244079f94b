#!/bin/bash
# issue 16, thirtieth session (main at .gitsha; after the 9 staging calls, < 8 min): gate|up's grid capped so that
# every block takes the same number of row groups. At the resident grid (396 blocks, 3 an SM) its 864 groups leave
# 72 blocks a third group after the rest are done; a shape's fourth element (max_blocks) now caps a step GEMV's grid:
# 288 blocks take 3 groups each, 216 take 4.
# 1. the capped-grid GEMV test (gate|up as the step runs it, down's slices) -> $OUT/h200_gemv_cap_tests_<sha>.txt
# 2. the replayed step at context 1024 across processes, base against gate|up capped at 288 and 216, rotated,
#    ROUNDS rounds -> $OUT/h200_gate_up_cap_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/h200_gemv_cap_tests_$s7.txt"
timeout 100 python3 -m pytest -m cuda -q -p no:cacheprovider -o addopts="" -rf tests/test_native_cuda.py \
  -k "capped_grids or gate_up_gelu" 2>&1 | grep -v "plugin EP" >> "$OUT/h200_gemv_cap_tests_$s7.txt"
tail -n 2 "$OUT/h200_gemv_cap_tests_$s7.txt"
OUT="$OUT" timeout 330 python3 scripts/h200_ab.py h200_gate_up_cap_ab_$s7 \
  '{"base": {}, "gu288": {"NATIVE_SHAPES": {"gate_up": [8, 2, 3, 288]}},
    "gu216": {"NATIVE_SHAPES": {"gate_up": [8, 2, 3, 216]}}}' ${ROUNDS:-2} 2>&1 | grep -v "plugin EP" | tail -n 8
