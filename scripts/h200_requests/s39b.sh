#!/bin/bash
# issue 16, s39a.sh's A/B alone and smaller, for a session whose budget failed machine starts have cut (< 5 min):
# main against qkv16 and qkv16 + o16, fresh modules, 3 rounds -> $OUT/h200_qkv_o_tiled_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 280 python3 scripts/h200_ab.py h200_qkv_o_tiled_ab_$s7 \
  '{"base": {}, "qkv16": {"NATIVE_SHAPES": {"qkv_tiled": [16, 16, 0]}}, "both": {"NATIVE_SHAPES": {"qkv_tiled": [16, 16, 0], "o_tiled": [16, 8, 0]}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 3
