#!/bin/bash
# issue 16, twenty-ninth session (right after s29c.sh, the same tree; < 8 min): the replayed step at context 4096
# across processes, base against 2 and 4 shared-memory stages on the full-attention layers (rotated order, ROUNDS
# rounds) -> $OUT/h200_attn_stages_ctx4096_ab_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" NATIVE_CONTEXT=4096 timeout 560 python3 scripts/h200_ab.py h200_attn_stages_ctx4096_ab_$s7 \
  '{"base": {}, "stg2": {"NATIVE_SHAPES": {"attn_stages_global": 2}},
    "stg4": {"NATIVE_SHAPES": {"attn_stages_global": 4}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 12
