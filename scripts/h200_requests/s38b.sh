#!/bin/bash
# issue 16, for the thirty-eighth session after s38a.sh (main at .gitsha; < 9.5 min): qkv and o as gemv_tiled at R 16,
# whose tiles (96 of qkv's, 72 of o's) are fewer than the SMs, so that every block loads its whole tile before its
# wait: the step's timeline with qkv (16, 16, 0), then the A/B across processes (fresh modules, 3 rounds) of main
# (gate|up R 16, down R 16) against qkv16 (16 warps: one fold slot a thread), qkv16w8 (8 warps: two, the second's
# parts after the first's), qkv8 (R 8, 16 warps: 192 tiles, a second round for some blocks), o16 and qkv16 + o16
# -> $OUT/h200_native_timeline_qkv16_<sha>.json, $OUT/h200_qkv_o_tiled_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 90 python3 scripts/h200_native_timeline.py --shapes '{"qkv_tiled": [16, 16, 0]}' \
  --tag qkv16_$s7 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-900
OUT="$OUT" timeout 470 python3 scripts/h200_ab.py h200_qkv_o_tiled_ab_$s7 \
  '{"base": {}, "qkv16": {"NATIVE_SHAPES": {"qkv_tiled": [16, 16, 0]}}, "qkv16w8": {"NATIVE_SHAPES": {"qkv_tiled": [16, 8, 0]}}, "qkv8": {"NATIVE_SHAPES": {"qkv_tiled": [8, 16, 0]}}, "o16": {"NATIVE_SHAPES": {"o_tiled": [16, 8, 0]}}, "both": {"NATIVE_SHAPES": {"qkv_tiled": [16, 16, 0], "o_tiled": [16, 8, 0]}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 3
