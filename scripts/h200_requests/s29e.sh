#!/bin/bash
# issue 16, twenty-ninth session (after s29d.sh; < 8 min): the same at context 1024, where a full-attention layer has
# two batches a sub-group (both in flight before the wait with 2 stages) and a windowed one a single batch (1 stage:
# cp.async instead of registers) -> $OUT/h200_attn_stages_ab_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 560 python3 scripts/h200_ab.py h200_attn_stages_ab_$s7 \
  '{"base": {}, "g2": {"NATIVE_SHAPES": {"attn_stages_global": 2}},
    "g2l1": {"NATIVE_SHAPES": {"attn_stages_global": 2, "attn_stages": 1}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 12
