#!/bin/bash
# issue 16, thirty-first session (main at .gitsha; right after s31b.sh, < 8 min): keys a cluster at context 4096 across
# processes (capacity 4144, "auto" clusters on the full layers: the grid holds ceil(4144 / keys) clusters and all of
# them are live at 4096 visible keys): 2048 (main, 3 live) against 4096 (2 live) and 1024 (5 live); rotated order, 3
# rounds -> $OUT/h200_cluster_keys_ctx4096_ab_<sha>.json. No other count was swept since the live clusters landed.
set -o pipefail
. scripts/h200_requests/preamble.sh
NATIVE_CONTEXT=4096 OUT="$OUT" timeout 560 python3 scripts/h200_ab.py h200_cluster_keys_ctx4096_ab_$s7 \
  '{"base": {}, "k4096": {"NATIVE_SHAPES": {"attn_cluster_keys": 4096}},
    "k1024": {"NATIVE_SHAPES": {"attn_cluster_keys": 1024}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 12
