#!/bin/bash
# issue 16, for the fortieth session's first call after the 9 staging calls (main at .gitsha; < 9 min): on the H200,
# the A/B the thirty-ninth session could run only on an H100 (h100_qkv_o_tiled_ab_874b124.json), across processes
# (fresh modules, 3 rounds): qkv and o row-major (the base: main before TILED_QKV / TILED_O) against main (both
# tiled), qkv tiled alone, and main with attention's clusters of 8 blocks (qkv's 96 tiled blocks leave
# 36 SMs free, spread over the GPCs: a cluster of 8 may find them while qkv runs where one of 16 cannot; the timeline
# in s40b.sh shows where attention starts) -> $OUT/h200_qkv_o_tiled_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 500 python3 scripts/h200_ab.py h200_qkv_o_tiled_ab_$s7 \
  '{"row": {"NATIVE_SHAPES": {"qkv_tiled": [], "o_tiled": []}}, "main": {}, "qkv16": {"NATIVE_SHAPES": {"o_tiled": []}}, "cl8": {"NATIVE_SHAPES": {"attn_cluster": 8}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 3
