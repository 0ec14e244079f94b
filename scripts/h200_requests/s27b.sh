#!/bin/bash
# issue 16, twenty-seventh session (branch attn-kv-early at .gitsha, after s27a): the replayed gemma3-1b step at context
# 4096 (capacity 4144) with the full-attention layers' attention over 2 and 4 clusters a KV head
# (Shapes.attn_clusters_global; the windowed layers keep one) against the default, across processes
# (scripts/h200_ab.py, rotated order, 3 rounds) -> $OUT/h200_glob_clusters_ctx4096_ab_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" NATIVE_CONTEXT=4096 timeout 560 python3 scripts/h200_ab.py h200_glob_clusters_ctx4096_ab_$s7 \
  '{"base": {}, "glob2": {"NATIVE_SHAPES": {"attn_clusters_global": 2}},
    "glob4": {"NATIVE_SHAPES": {"attn_clusters_global": 4}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 12
