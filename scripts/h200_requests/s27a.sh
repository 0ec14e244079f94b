#!/bin/bash
# issue 16, twenty-seventh session (branch attn-kv-early at .gitsha; after the 9 staging calls, < 4 min): in attention_cl's
# phase 1 the warp holding key t loads its k and v rows only after the q heads' norm and rotary (ptxas batches the 16
# q-row loads right after the wait, the 6 k/v loads later: a second dependent L2 round trip on that block's path, which
# the cluster barrier waits for; at context 1024 every sub-group runs the same number of key batches, so that warp has
# no slack). -DVLM_KV_EARLY issues all of them in one batch. The step's timeline with it beside the plain build
# (stamped, and unstamped replay-timed; outputs compared bit for bit with the decoder's graph)
# -> $OUT/h200_native_timeline_kv_early_<sha>.json. The native CUDA tests with the define run only if it is made default.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 220 python3 scripts/h200_native_timeline.py --tag kv_early_$s7 --variants \
  '{"kv_early": ["-DVLM_KV_EARLY"], "kv_early_replay": ["-DVLM_KV_EARLY", "nostamps"], "plain_replay": ["nostamps"]}' \
  2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-600
