#!/bin/bash
# issue 16, prepared in the thirty-third session (right after s34a.sh, the same tree; < 5 min): the step on its first
# module, on a fresh one with the first kept loaded, and on a fresh one with the first let go (does the fast place
# need the slow one held?), across processes, 2 rounds rotated
# -> $OUT/h200_module_free_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 280 python3 scripts/h200_ab.py h200_module_free_ab_$s7 \
  '{"first": {}, "fresh": {"NATIVE_REBUILD": "fresh"}, "fresh_free": {"NATIVE_REBUILD": "fresh_free"}}' \
  ${ROUNDS:-2} 2>&1 | grep -v "plugin EP" | tail -n 8
