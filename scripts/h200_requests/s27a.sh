#!/bin/bash
# issue 16, twenty-seventh session (branch attn-kv-early at .gitsha; after the 9 staging calls, < 7 min). Two timelines
# (stamped builds, every build's logits compared bit for bit with the decoder's graph):
# 1. context 1024: in attention_cl's phase 1 the warp holding key t loads its k and v rows only after the q heads'
#    norm and rotary (ptxas batches the 16 q-row loads right after the wait, the 6 k/v loads later: a second dependent
#    L2 round trip on that block's path, which the cluster barrier waits for; at context 1024 every sub-group runs the
#    same number of key batches, so that warp has no slack). -DVLM_KV_EARLY issues all of them in one batch; beside it
#    the plain and KV_EARLY builds unstamped, replay-timed only -> $OUT/h200_native_timeline_kv_early_<sha>.json.
# 2. context 4096 with Shapes.attn_clusters_global 4: the full-attention layers (4144 keys, 8 batches a sub-group in
#    one cluster of 16) over 4 clusters, the windowed ones unchanged -> h200_native_timeline_glob4_ctx4096_<sha>.json
#    (the base at 4096: h200_native_timeline_ctx4096_<sha>.json).
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 200 python3 scripts/h200_native_timeline.py --tag kv_early_$s7 --variants \
  '{"kv_early": ["-DVLM_KV_EARLY"], "kv_early_replay": ["-DVLM_KV_EARLY", "nostamps"], "plain_replay": ["nostamps"]}' \
  2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-500
OUT="$OUT" timeout 170 python3 scripts/h200_native_timeline.py --context 4096 --tag ctx4096_$s7 2>&1 \
  | grep -v "plugin EP" | tail -n 1 | cut -c1-300
OUT="$OUT" timeout 170 python3 scripts/h200_native_timeline.py --context 4096 --shapes '{"attn_clusters_global": 4}' \
  --tag glob4_ctx4096_$s7 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-300
