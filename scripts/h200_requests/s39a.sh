#!/bin/bash
# issue 16, for the thirty-ninth session's first call after the 9 staging calls (main at .gitsha; < 9 min): the
# thirty-eighth session's s38b.sh (never run; removed) less its o16-alone variant (o as gemv_tiled at R 8 measured
# within the spread of main at e11b443; `both` still shows o16's share): the step's timeline with qkv (16, 16, 0), then the A/B across processes (fresh modules,
# 3 rounds) of main against qkv16, qkv16w8, qkv8 and qkv16 + o16
# -> $OUT/h200_native_timeline_qkv16_<sha>.json, $OUT/h200_qkv_o_tiled_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 90 python3 scripts/h200_native_timeline.py --shapes '{"qkv_tiled": [16, 16, 0]}' \
  --tag qkv16_$s7 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-900
OUT="$OUT" timeout 440 python3 scripts/h200_ab.py h200_qkv_o_tiled_ab_$s7 \
  '{"base": {}, "qkv16": {"NATIVE_SHAPES": {"qkv_tiled": [16, 16, 0]}}, "qkv16w8": {"NATIVE_SHAPES": {"qkv_tiled": [16, 8, 0]}}, "qkv8": {"NATIVE_SHAPES": {"qkv_tiled": [8, 16, 0]}}, "both": {"NATIVE_SHAPES": {"qkv_tiled": [16, 16, 0], "o_tiled": [16, 8, 0]}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 3
