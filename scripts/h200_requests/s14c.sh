#!/bin/bash
# issue 16, session 14, branch fold-probe (snapshot .gpuwt/fp, its sha in .gitsha). After s14b: every thread's fold
# loads are in by ~0.58 us after the wait, the vector by ~2.1. -DVLM_PROBE_PHASES: thread 0's phases (3 loads in,
# 4 fold_flat8's extra parts summed after their barrier, 5 first block reduction, 7 second, 6 vector), with
# fold_flat8 (qkv, head), with -DVLM_NO_FLAT8 (fold_regs everywhere) and with -DVLM_RED_FAST (block_sum_db: no first
# barrier, the warps' partials summed from shared memory in the butterfly's order, bit-equal); RED_FAST unstamped
# beside an unstamped default build -> h200_native_timeline_probe_phases.json
bash .gpuwt/install.sh > /dev/null
cd .gpuwt/fp && cp ../../.gitsha . && mkdir -p tests/data && cp -r ../../tests/data/exported tests/data/
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 300 python3 scripts/h200_native_timeline.py --variants '{"phases": ["-DVLM_PROBE_PHASES"],
  "phases_regs": ["-DVLM_PROBE_PHASES", "-DVLM_NO_FLAT8"],
  "redfast_phases": ["-DVLM_PROBE_PHASES", "-DVLM_RED_FAST"], "plain": ["nostamps"],
  "redfast_plain": ["nostamps", "-DVLM_RED_FAST"]}' --tag probe_phases 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-900
python3 -c "import json; d=json.load(open('$OUT/h200_native_timeline_probe_phases.json')); print({k: v['gemv_fold_probes_us'] for k, v in d['variants'].items()})"
