#!/bin/bash
# issue 16, thirty-sixth session, call 3 (main with docs/branches/tiled-late.patch applied, 5c92382, at .gitsha; after
# the 9 staging calls; < 7 min): the first weight
# loads of the kernels resident during attention moved after their pdl_wait, so that attention's KV loads do not
# meet them: gate|up's first tile (gemv_tiled PRE 0) and o's rows (gemv PF 0). Their CUDA tests, the step's
# timeline with both late, then the A/B across processes (fresh modules, 3 rounds)
# -> $OUT/h200_late_loads_tests_<sha>.txt, $OUT/h200_native_timeline_late_<sha>.json, $OUT/h200_late_loads_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
python3 -m pytest -m cuda tests/test_native_cuda.py -k "tiled" -q -p no:cacheprovider -o addopts="" -rf 2>&1 \
  | grep -v "plugin EP" > "$OUT/h200_late_loads_tests_$s7.txt"
tail -n 3 "$OUT/h200_late_loads_tests_$s7.txt"
OUT="$OUT" timeout 100 python3 scripts/h200_native_timeline.py --shapes '{"gate_up_tiled": [4, 8, 0, 0], "o": [8, 1, 0]}' \
  --tag late_$s7 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-600
OUT="$OUT" timeout 330 python3 scripts/h200_ab.py h200_late_loads_ab_$s7 \
  '{"base": {}, "gu_late": {"NATIVE_SHAPES": {"gate_up_tiled": [4, 8, 0, 0]}}, "o_late": {"NATIVE_SHAPES": {"o": [8, 1, 0]}}, "both": {"NATIVE_SHAPES": {"gate_up_tiled": [4, 8, 0, 0], "o": [8, 1, 0]}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 3
