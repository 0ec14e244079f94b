#!/bin/bash
# issue 16, thirty-sixth session, call 2 (main at .gitsha, gate|up as gemv_tiled by default; after the 9 staging
# calls; < 9 min): what the thirty-fifth session measured and lost with its machine, again: the step's timeline with
# gate|up as gemv_split (gate_up_tiled ()) and as main's default, the A/B across processes (fresh modules, 3 rounds),
# then the bench at contexts 1024 and 4096 -> $OUT/h200_native_timeline_{split,tiled}_<sha>.json,
# $OUT/h200_tiled_gate_up_ab_<sha>.json, $OUT/h200_<sha>_native_bench_ctx{1024,4096}_gemma3-1b.*
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 120 python3 scripts/h200_native_timeline.py --shapes '{"gate_up_tiled": []}' --tag split_$s7 2>&1 \
  | grep -v "plugin EP" | tail -n 2 | cut -c1-300
OUT="$OUT" timeout 120 python3 scripts/h200_native_timeline.py --tag tiled_$s7 2>&1 | grep -v "plugin EP" | tail -n 2 \
  | cut -c1-300
OUT="$OUT" timeout 260 python3 scripts/h200_ab.py h200_tiled_gate_up_ab_$s7 \
  '{"split": {"NATIVE_SHAPES": {"gate_up_tiled": []}}, "tiled": {}, "t4": {"NATIVE_SHAPES": {"gate_up_tiled": [4, 8, 4]}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 8
for c in 1024 4096; do
  timeout 150 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts $c \
    --modes native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --out "$OUT" \
    --tag h200_${s7}_native_bench_ctx${c}_gemma3-1b 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-300
done
