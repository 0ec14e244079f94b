#!/bin/bash
# issue 16, twenty-ninth session (right after s29f.sh, the same tree; < 5 min): 3. base against attn_clusters_global
# "auto" at context 1024 in a KV capacity of 4144 (a default load's short prompt: 1 cluster live, 2 exiting at once)
# -> $OUT/h200_live_clusters_ctx1024_cap4144_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
V='{"base": {}, "auto": {"NATIVE_SHAPES": {"attn_clusters_global": "auto"}}}'
OUT="$OUT" NATIVE_CAPACITY=4144 timeout 300 python3 scripts/h200_ab.py h200_live_clusters_ctx1024_cap4144_ab_$s7 "$V" \
  ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 1
