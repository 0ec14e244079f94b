#!/bin/bash
# issue 16, thirty-fifth session, part 2 (right after s35a.sh, the same tree; < 6 min): the step with gate|up as
# gemv_tiled at 4 blocks an SM (MB 4, 64 registers) and at 3 (MB 0, 66), against the default, across processes,
# every variant on a module loaded afresh (--fresh), 3 rounds rotated -> $OUT/h200_tiled_gate_up_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 500 python3 scripts/h200_ab.py h200_tiled_gate_up_ab_$s7 \
  '{"base": {}, "t4": {"NATIVE_SHAPES": {"gate_up_tiled": [4, 8, 4]}}, "t4b3": {"NATIVE_SHAPES": {"gate_up_tiled": [4, 8, 0]}}}' \
  ${ROUNDS:-3} --fresh 2>&1 | grep -v "plugin EP" | tail -n 12
