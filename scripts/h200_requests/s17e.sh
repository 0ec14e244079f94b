#!/bin/bash
# issue 16, seventeenth session, branch smem-pf (at .gitsha): gate|up PF 3 replayed slower, 0.971 ms, because its
# blocks no longer started during attention (lead -1.2 us against -5.7; h200_native_timeline_gu3_e2930c0.json).
# Hypothesis: the SMs' L1/shared carveout. Shapes.carveout 100 sets one preference for every step kernel.
# (1) the timeline of carveout 100 + gate|up PF 3; (2) A/B across processes (scripts/h200_ab.py, 3 rounds, rotated):
# base, c100, c100 + gate|up PF 3, c100 + gate|up and qkv PF 3 -> h200_carveout_ab_<sha>.json
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
OUT=$OUT timeout 150 python3 scripts/h200_native_timeline.py --shapes '{"carveout": 100, "gate_up": [8, 2, 3]}' \
  --tag c100gu3_$s7 2>&1 | grep -v "plugin EP" | grep -E "^stamped|replay_ms_median|Error" | cut -c1-700
OUT=$OUT timeout 420 python3 scripts/h200_ab.py h200_carveout_ab_$s7 \
  '{"base": {}, "c100": {"NATIVE_SHAPES": {"carveout": 100}},
    "c100gu3": {"NATIVE_SHAPES": {"carveout": 100, "gate_up": [8, 2, 3]}},
    "c100gu3q3": {"NATIVE_SHAPES": {"carveout": 100, "gate_up": [8, 2, 3], "qkv": [8, 1, 3]}}}' 3 2>&1 \
  | grep -v "plugin EP" | tail -n 14 | cut -c1-400
