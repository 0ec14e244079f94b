#!/bin/bash
# issue 16, PREPARED (not run): s11.sh's second half (~4.5 min on a warm machine), right after s11a.sh, with .gpuwt/
# holding install.sh, req.sh, attn-pro.sh, attn-pro.sha and the snapshot .gpuwt/attn-pro (branch attn-pro, d41286a).
# Files: h200_native_timeline_nopdl.json, attn-pro/{h200_native_timeline_wait_sector.json, log.txt}.
bash .gpuwt/install.sh
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
# attention launched without PDL (it starts after qkv ends anyway): does its first q read come sooner?
OUT=$OUT timeout 150 python3 scripts/h200_native_timeline.py --variants '{"attn_nopdl": ["nopdl:attn"]}' --tag nopdl \
  2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-1500
# branch attn-pro: one q read before / after the wait, whole-sector GEMV stores, the one-pass fold
export VLMDECODE_GIT_SHA=$(cat .gpuwt/attn-pro.sha); bash .gpuwt/req.sh attn-pro
