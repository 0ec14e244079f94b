#!/bin/bash
# issue 16, prepared in the twenty-eighth session for the next (right after s29a.sh, the same tree; < 7 min): the replayed
# step at context 4096 across processes, base against 2 and 4 clusters on the full-attention layers
# (Shapes.attn_clusters_global; rotated order, ROUNDS rounds) -> $OUT/h200_glob_clusters_ctx4096_ab_<sha>.json. A win
# at 4096 in every round, with 2048 equal (rerun with NATIVE_CONTEXT=2048), is the case for choosing the count per
# generation (two captured steps; not built).
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" NATIVE_CONTEXT=4096 timeout 400 python3 scripts/h200_ab.py h200_glob_clusters_ctx4096_ab_$s7 \
  '{"base": {}, "glob2": {"NATIVE_SHAPES": {"attn_clusters_global": 2}},
    "glob4": {"NATIVE_SHAPES": {"attn_clusters_global": 4}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 12
