#!/bin/bash
# issue 16, twenty-seventh session (branch attn-kv-early at .gitsha, right after s27a): the replayed gemma3-1b step
# (context 1024) with -DVLM_KV_EARLY against the plain build across processes (scripts/h200_ab.py, rotated order,
# ROUNDS rounds) -> $OUT/h200_kv_early_ab_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 540 python3 scripts/h200_ab.py h200_kv_early_ab_$s7 \
  '{"base": {}, "kv_early": {"VLM_NATIVE_DEFINES": "-DVLM_KV_EARLY"}}' ${ROUNDS:-6} 2>&1 | grep -v "plugin EP" | tail -n 14
