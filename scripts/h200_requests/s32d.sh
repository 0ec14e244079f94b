#!/bin/bash
# issue 16, thirty-second session, branch stage-q (right after s32c.sh, the same tree; < 5 min): stamped timelines
# of the step at context 1024, the default and attn_stage_q, one process each, for attention_cl's phases (stamp 3:
# q / k normalised and rotated) -> $OUT/h200_native_timeline_{base,stage_q}_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 140 python3 scripts/h200_native_timeline.py --tag base_$s7 2>&1 | grep -v "plugin EP" | tail -n 4 \
  | cut -c1-300
OUT="$OUT" timeout 140 python3 scripts/h200_native_timeline.py --shapes '{"attn_stage_q": true}' --tag stage_q_$s7 \
  2>&1 | grep -v "plugin EP" | tail -n 4 | cut -c1-300
ls "$OUT"
