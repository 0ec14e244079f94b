#!/bin/bash
# issue 16, prepared in the twentieth session, right after s21b.sh (warm, < 6 min): head_bound's shapes alone (MINB
# 0/2-4 and the 6-bit copy, scripts/h200_head_bound_sweep.py), then the bounded vs full head A/B with the 6-bit copy
# beside them at contexts 1024 and 4096 (scripts/h200_bounded_head.py --bits6)
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 100 python3 scripts/h200_head_bound_sweep.py --rounds 7 2>&1 | tail -n 14 | cut -c1-300
OUT=$OUT timeout 400 python3 scripts/h200_bounded_head.py --contexts 1024 4096 --rounds 5 --bits6 2>&1 \
  | grep -v "plugin EP" | tail -n 12 | cut -c1-600
