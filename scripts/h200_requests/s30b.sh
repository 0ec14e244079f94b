#!/bin/bash
# issue 16, prepared in the twenty-ninth session (right after s30a.sh, the same tree; < 7 min): the replayed step at
# context 1024 across processes, base against attention_cl in 16 warps with 1 and 2 keys a batch (2: 64 bytes of
# spills, attention_cl_w16_ptxas.txt), rotated order, ROUNDS rounds -> $OUT/h200_attn_w16_ab_<sha>.json. A win in every
# round is the case for Shapes.for_head_dim's attention shape; then the CUDA suite and the bench.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 400 python3 scripts/h200_ab.py h200_attn_w16_ab_$s7 \
  '{"base": {}, "w16b1": {"NATIVE_SHAPES": {"attn_threads": 512, "attn_batch": 1}},
    "w16b2": {"NATIVE_SHAPES": {"attn_threads": 512, "attn_batch": 2}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 12
