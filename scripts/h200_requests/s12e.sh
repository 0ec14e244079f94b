#!/bin/bash
# issue 16, session 12: Nsight Compute's warp-state counters over one native gemma3-1b step at main (.gitsha): the
# default shapes, then gate|up double-buffered (PF 2). Files: h200_native_stalls{,_gate_up_pf2}.json
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 330 python3 scripts/h200_native_stalls.py 2>&1 | grep -v "plugin EP" | tail -n 12 | cut -c1-400
NATIVE_SHAPES='{"gate_up": [8, 2, 2]}' OUT=$OUT timeout 200 python3 scripts/h200_native_stalls.py --tag gate_up_pf2 \
  2>&1 | grep -v "plugin EP" | tail -n 8 | cut -c1-400
