#!/bin/bash
# issue 16, prepared in the thirty-second session (right after s33a.sh, the same tree; < 4 min): the landed decision
# taken on a variant with a module of its own, measured with every variant on a freshly loaded module
# (h200_ab.py --fresh): gate|up's split fold (PF 3, main's default since h200_gate_up_split_ab_321767e.json's 0.985x)
# against PF 0, 4 rounds
# -> $OUT/h200_fresh_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 290 python3 scripts/h200_ab.py h200_fresh_ab_$s7 \
  '{"base": {}, "gu_pf0": {"NATIVE_SHAPES": {"gate_up": [8, 2, 0]}}}' ${ROUNDS:-4} --fresh 2>&1 \
  | grep -v "plugin EP" | tail -n 11
