#!/bin/bash
# issue 16, twenty-seventh session (branch attn-kv-early at .gitsha, after s27b): the replayed gemma3-1b step at context
# 1024 with -DVLM_KV_EARLY (VLM_NATIVE_DEFINES, this branch's hook) and with the full-attention layers over 2 clusters
# (Shapes.attn_clusters_global 2) against the default, across processes (scripts/h200_ab.py, rotated order, 4 rounds)
# -> $OUT/h200_kv_early_ab_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 560 python3 scripts/h200_ab.py h200_kv_early_ab_$s7 \
  '{"base": {}, "kv_early": {"VLM_NATIVE_DEFINES": "-DVLM_KV_EARLY"},
    "glob2": {"NATIVE_SHAPES": {"attn_clusters_global": 2}}}' ${ROUNDS:-4} 2>&1 | grep -v "plugin EP" | tail -n 15
