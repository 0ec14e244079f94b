#!/bin/bash
# issue 16, session 21, branch gemv-spread (a479f41), right after s21d.sh (warm): the step GEMVs with SPREAD 1, each class alone and all four,
# A/B'd across processes (scripts/h200_ab.py: the gemma3-1b step replayed, context 1024; 3 rounds, rotated order).
# o and down spread with PF 0 (their PF 1 / 2 spread instances spill 32 bytes); o_pf0 is o's PF 0 alone, unspread.
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 560 python3 scripts/h200_ab.py h200_gemv_spread_ab_$(cut -c1-7 .gitsha) '{"base": {},
  "gate_up": {"NATIVE_SHAPES": {"gate_up": [8, 2, 0, 1]}}, "qkv": {"NATIVE_SHAPES": {"qkv": [8, 1, 1, 1]}},
  "o": {"NATIVE_SHAPES": {"o": [8, 1, 0, 1]}}, "o_pf0": {"NATIVE_SHAPES": {"o": [8, 1, 0]}},
  "down": {"NATIVE_SHAPES": {"down": [4, 1, 0, 1]}},
  "all": {"NATIVE_SHAPES": {"qkv": [8, 1, 1, 1], "o": [8, 1, 0, 1], "gate_up": [8, 2, 0, 1], "down": [4, 1, 0, 1]}}}' 3 \
  2>&1 | grep -v "plugin EP" | tail -n 26 | cut -c1-400
