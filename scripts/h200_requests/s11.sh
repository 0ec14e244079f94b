#!/bin/bash
# issue 16, PREPARED for the eleventh session (not run): one call after staging, from main's root with .gpuwt/
# holding install.sh, req.sh, attn-pro.sh, attn-pro.sha and the snapshot .gpuwt/attn-pro (branch attn-pro at d41286a
# or later; see attn-pro.sh). ~8-9 min incl. the gemma3-1b fixture, near the 10-min call limit (split it after the
# timeline if needed). <= 8 files come back:
# h200_native_{slice,gate_up_pf}.json, h200_native_timeline_nopdl.json, h200_native.json, attn-pro/{...}, this log.
bash .gpuwt/install.sh
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
# down's split-K 8 / 6 / 4: fewer parts for the next qkv's fold to read
OUT=$OUT timeout 200 python3 scripts/h200_native_pdl.py --set slice 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-1500
# gate|up's first row group in flight during its fold
OUT=$OUT timeout 200 python3 scripts/h200_native_pdl.py --set gate_up_pf 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-1500
# attention launched without PDL (it starts after qkv ends anyway): does its first q read come sooner?
OUT=$OUT timeout 150 python3 scripts/h200_native_timeline.py --variants '{"attn_nopdl": ["nopdl:attn"]}' --tag nopdl \
  2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-1500
# branch attn-pro: one q read before / after the wait, whole-sector GEMV stores
export VLMDECODE_GIT_SHA=$(cat .gpuwt/attn-pro.sha); bash .gpuwt/req.sh attn-pro
