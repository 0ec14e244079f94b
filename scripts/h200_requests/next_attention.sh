#!/bin/bash
# issue 16, prepared for the next session (NOT run yet): where attention_cl's 6-7 us go, and whether lighter o
# blocks let all of gate|up's blocks in during attention. From main's root after staging (bash .gpuwt/install.sh),
# copied to .gpuwt/: ~3 min incl. the gemma3-1b fixture. Files straight under $OUT (<= 8).
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 200 python3 scripts/h200_native_timeline.py --tag phases 2>&1 | grep -v "plugin EP" \
  | sed -n '/attention_phases_by_kind_us/,/^}/p' | tr -d ' \n' | cut -c1-900; echo
# does a qkv of 96 blocks (8 warps x 2 rows) let attention's cluster in before qkv ends? (0.960 vs 0.935 ms as a whole)
OUT=$OUT timeout 120 python3 scripts/h200_native_timeline.py --shapes '{"qkv": [8, 2]}' --tag qkv8x2 2>&1 \
  | grep -v "plugin EP" | sed -n '/classes_us/,/attention_phases/p' | tr -d ' \n' | cut -c1-700; echo
mkdir -p $OUT/o && OUT=$OUT/o timeout 300 python3 scripts/h200_native_pdl.py --set o 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-1800
