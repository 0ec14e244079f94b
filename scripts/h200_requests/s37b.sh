#!/bin/bash
# issue 16, prepared in the thirty-sixth session for the next (main at .gitsha; after s37a.sh; < 7 min): gate|up's
# tiles larger, so that more of its weights load before its wait (down's tiled slices gained most from the tile they
# load during gate|up's tail): R 8 (75 registers, 3 blocks an SM, a tile 18 KB) and R 16 (124, 2 blocks an SM)
# against main's R 4; and o as gemv_tiled (Shapes.o_tiled R 8; slower than o's gemv in the probe, but so was the
# probe's estimate for down). The o test, the step's timeline at gate|up R 8, then the A/B across processes (fresh
# modules, 3 rounds)
# -> $OUT/h200_native_timeline_gu8_<sha>.json, $OUT/h200_gate_up_tile_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
python3 -m pytest -m cuda tests/test_native_cuda.py -k "tiled_gemv_follows and o_tiled" -q -p no:cacheprovider \
  -o addopts="" -rf 2>&1 | grep -v "plugin EP" | tail -n 2
OUT="$OUT" timeout 100 python3 scripts/h200_native_timeline.py --shapes '{"gate_up_tiled": [8, 8, 0]}' \
  --tag gu8_$s7 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-900
OUT="$OUT" timeout 330 python3 scripts/h200_ab.py h200_gate_up_tile_ab_$s7 \
  '{"base": {}, "gu8": {"NATIVE_SHAPES": {"gate_up_tiled": [8, 8, 0]}}, "gu16": {"NATIVE_SHAPES": {"gate_up_tiled": [16, 8, 0]}}, "o8": {"NATIVE_SHAPES": {"o_tiled": [8, 8, 0]}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 3
