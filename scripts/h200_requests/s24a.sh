#!/bin/bash
# issue 16, prepared in the twenty-third session (branch split3 at .gitsha; after the staging calls, or right after
# s23f/s23g on main): gate|up's fold over 3 of 8 warps, 5 warps' first rows in flight (PF 4, gemv_split<5,2,3>),
# against the default PF 3 (4 of 8): the split tests, the step's timeline with (8, 2, 4), and the replayed step
# across processes (h200_ab.py, 3 rounds) -> $OUT/h200_gate_up_split3_ab_<sha>.json (gemma3-1b, context 1024).
set -o pipefail
. scripts/h200_requests/preamble.sh
timeout 200 python3 -m pytest -m cuda tests/test_native_split_cuda.py -q -p no:cacheprovider -o addopts="" -rf -x 2>&1 \
  | grep -v "plugin EP" | tee "$OUT/h200_gate_up_split3_tests_$s7.txt" | tail -n 4 || exit 1
OUT="$OUT" timeout 200 python3 scripts/h200_native_timeline.py --shapes '{"gate_up": [8, 2, 4]}' \
  --tag gate_up_split3_$s7 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-300
OUT="$OUT" timeout 330 python3 scripts/h200_ab.py h200_gate_up_split3_ab_$s7 \
  '{"base": {}, "split3": {"NATIVE_SHAPES": {"gate_up": [8, 2, 4]}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 7
