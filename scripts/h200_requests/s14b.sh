#!/bin/bash
# issue 16, session 14, branch fold-probe (snapshot .gpuwt/fp, its sha in .gitsha). After s14a: thread 0's fold
# loads are in by ~0.7 us after the wait, the vector by ~2.1. (1) -DVLM_PROBE_BLOCK: slot 3 when every thread of
# the block has its loads (a barrier after them; fold_flat8 and fold_regs), slot 6 at the vector; (2) with
# -DVLM_PROBE_FOUR_PARTS (timing only, wrong sums): fold_flat8's parts 4-7 re-read parts 0-3's lines; stamped, and
# unstamped beside an unstamped default build -> h200_native_timeline_probe_block.json
bash .gpuwt/install.sh > /dev/null
cd .gpuwt/fp && cp ../../.gitsha . && mkdir -p tests/data && cp -r ../../tests/data/exported tests/data/
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 300 python3 scripts/h200_native_timeline.py --variants '{"block": ["-DVLM_PROBE_BLOCK"],
  "block_four": ["-DVLM_PROBE_BLOCK", "-DVLM_PROBE_FOUR_PARTS"], "plain": ["nostamps"],
  "four_plain": ["nostamps", "-DVLM_PROBE_FOUR_PARTS"]}' --tag probe_block 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-900
python3 -c "import json; d=json.load(open('$OUT/h200_native_timeline_probe_block.json')); print({k: v['gemv_fold_probes_us'] for k, v in d['variants'].items()})"
