#!/bin/bash
# issue 16, thirty-sixth session, call 4 (main at .gitsha; after the 9 staging calls; < 6 min): down's split-K slices
# as gemv_tiled over a tiled copy (Shapes.down_tiled): the tiled CUDA tests (kernel against float64, the captured
# step's tokens against the default step's), the step's timeline with it, then the A/B across processes (fresh
# modules, 3 rounds): main's default, R 16 and R 8 at 8 warps
# -> $OUT/h200_tiled_down_tests_<sha>.txt, $OUT/h200_native_timeline_down16_<sha>.json, $OUT/h200_tiled_down_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
python3 -m pytest -m cuda tests/test_native_cuda.py -k "tiled" -q -p no:cacheprovider -o addopts="" -rf 2>&1 \
  | grep -v "plugin EP" > "$OUT/h200_tiled_down_tests_$s7.txt"
tail -n 3 "$OUT/h200_tiled_down_tests_$s7.txt"
OUT="$OUT" timeout 100 python3 scripts/h200_native_timeline.py --shapes '{"down_tiled": [16, 8, 0]}' \
  --tag down16_$s7 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-900
OUT="$OUT" timeout 330 python3 scripts/h200_ab.py h200_tiled_down_ab_$s7 \
  '{"base": {}, "dt16": {"NATIVE_SHAPES": {"down_tiled": [16, 8, 0]}}, "dt8": {"NATIVE_SHAPES": {"down_tiled": [8, 8, 0]}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 3
