#!/bin/bash
# issue 16, the twenty-ninth session's last device minutes (< 150 s; after the 9 staging calls): a first look at
# attention_cl in 16 warps (s30a.sh / s30b.sh are the full requests): one process each of base and 16 warps at one
# key a batch (h200_native_replay.py, context 1024) -> $OUT/h200_attn_w16_ab1_<sha>.json, then the 16-warp step's
# timeline -> $OUT/h200_native_timeline_w16b1_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 100 python3 scripts/h200_ab.py h200_attn_w16_ab1_$s7 \
  '{"base": {}, "w16b1": {"NATIVE_SHAPES": {"attn_threads": 512, "attn_batch": 1}}}' 1 2>&1 | grep -v "plugin EP" | tail -n 3
OUT="$OUT" timeout 60 python3 scripts/h200_native_timeline.py --shapes '{"attn_threads": 512, "attn_batch": 1}' \
  --tag w16b1_$s7 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-300
