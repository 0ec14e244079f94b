#!/bin/bash
# issue 16, session 12, first call after staging (from main's root, .gpuwt/ holding install.sh): attention_cl's K/V
# batch b + 1 in flight while batch b is reduced (-DVLM_ATTN_DB / -DVLM_ATTN_REUSE, stamped builds beside the plain
# one) at context 1024 and 4096; then attention_cl's clusters a KV head (1 / 2 / auto) at context 4096. Files:
# h200_native_timeline_attn_db{,_ctx4096}.json, h200_native_clusters_ctx4096.json
bash .gpuwt/install.sh
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
V='{"db": ["-DVLM_ATTN_DB"], "reuse": ["-DVLM_ATTN_REUSE"]}'
OUT=$OUT timeout 200 python3 scripts/h200_native_timeline.py --variants "$V" --tag attn_db \
  2>&1 | grep -v "plugin EP" | tail -n 4 | cut -c1-1800
OUT=$OUT timeout 150 python3 scripts/h200_native_timeline.py --context 4096 --variants "$V" --tag attn_db_ctx4096 \
  2>&1 | grep -v "plugin EP" | tail -n 4 | cut -c1-1800
OUT=$OUT timeout 200 python3 scripts/h200_native_pdl.py --set clusters --context 4096 2>&1 | grep -v "plugin EP" \
  | tail -n 2 | cut -c1-1500
