#!/bin/bash
# issue 16, session 16: Nsight Compute's warp-state counters over one native gemma3-1b step at main (.gitsha, the
# code of 8f7bae3: every step kernel's parameter touch), with the registers column that 8fc2db4's run lacked
# (d32227c keeps launch__registers_per_thread) -> h200_native_stalls_<sha>.json
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 300 python3 scripts/h200_native_stalls.py --tag $(cut -c1-7 .gitsha) 2>&1 | grep -v "plugin EP" \
  | tail -n 12 | cut -c1-400
