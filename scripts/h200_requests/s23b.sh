#!/bin/bash
# issue 16, session 23 (branch mlp-ll at .gitsha; right after s23a.sh, the machine still warm): the replayed step
# with Shapes.mlp_ll against the default, processes of their own in rotated order (h200_ab.py, 3 rounds), gemma3-1b
# at context 1024 -> $OUT/h200_mlp_ll_ab_<sha>.json.
set -o pipefail
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
OUT="$OUT" timeout 560 python3 scripts/h200_ab.py h200_mlp_ll_ab_$s7 \
  '{"base": {}, "mlp_ll3": {"NATIVE_SHAPES": {"mlp_ll": 3}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 8
