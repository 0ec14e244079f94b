#!/bin/bash
# issue 16, seventeenth session, branch smem-pf (at .gitsha): PF 3, a GEMV's first row group copied into shared
# memory by cp.async before pdl_wait (no registers held: gate|up 80 against PF 1's 128, so 3 blocks an SM stay).
# Why: gate|up's blocks are resident during attention and o (timeline: they start ~5.7 us before o ends) while DRAM
# is idle; PF 1 (registers) was slower, 0.937 vs 0.907 (h200_native_gate_up_pf_5a2fea7.json), with 2 blocks an SM.
# (1) the GEMV tests with PF 3 -> h200_smem_pf_tests_<sha>.txt; (2) gate|up PF 3's timeline. The A/B: s17d.sh
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_native_cuda.py -k gemv 2>&1 | tail -n 5 \
  | tee $OUT/h200_smem_pf_tests_$s7.txt
OUT=$OUT timeout 150 python3 scripts/h200_native_timeline.py --shapes '{"gate_up": [8, 2, 3]}' --tag gu3_$s7 2>&1 \
  | grep -v "plugin EP" | grep -E "^stamped|replay_ms_median|Error" | cut -c1-700
