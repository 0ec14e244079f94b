#!/bin/bash
# issue 16, PREPARED (not run): the first call after staging (~5 min incl. the gemma3-1b fixture build), from main's
# root with .gpuwt/ holding install.sh; then s11b.sh and `req.sh lookahead` (lookahead.sh) back to back (a warm
# machine keeps the fixture cache and /tmp/site). Files: h200_native_{slice,gate_up_pf}.json,
# h200_native_timeline_nopdl.json.
bash .gpuwt/install.sh
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
# down's split-K 8 / 6 / 4: fewer parts for the next qkv's fold to read
OUT=$OUT timeout 200 python3 scripts/h200_native_pdl.py --set slice 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-1500
# gate|up's first row group in flight during its fold
OUT=$OUT timeout 170 python3 scripts/h200_native_pdl.py --set gate_up_pf 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-1500
# attention launched without PDL (it starts after qkv ends anyway): does its first q read come sooner?
OUT=$OUT timeout 130 python3 scripts/h200_native_timeline.py --variants '{"attn_nopdl": ["nopdl:attn"]}' --tag nopdl \
  2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-1500
