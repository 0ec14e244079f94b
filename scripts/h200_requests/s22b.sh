#!/bin/bash
# issue 16, session 22 (branch l1pf), right after s22a.sh (warm). Only its head sweep loop was run (s22a made the A/B moot): the L1 prefetch variants A/B'd across processes
# (scripts/h200_ab.py, the gemma3-1b full-head step replayed, context 1024, 3 rounds, rotated order; VLM_NATIVE_DEFINES
# is read by kernels.compile_module on the branch), then head_bound alone (its default shape) with and without its
# next group prefetched into L1 (bit 4; the full head with bit 32) and head_pick reading the vector only where a block
# has a candidate (-DVLM_PICK_LAZY), each in a process of its own.
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
OUT=$OUT timeout 470 python3 scripts/h200_ab.py h200_l1pf_ab_$s7 '{"base": {},
  "gu1": {"VLM_NATIVE_DEFINES": "-DVLM_L1PF=1"}, "gu3": {"VLM_NATIVE_DEFINES": "-DVLM_L1PF=3"},
  "gu3_head": {"VLM_NATIVE_DEFINES": "-DVLM_L1PF=51"},
  "gu3_down0": {"VLM_NATIVE_DEFINES": "-DVLM_L1PF=195", "NATIVE_SHAPES": {"down": [4, 1, 0]}},
  "gu3_o0": {"VLM_NATIVE_DEFINES": "-DVLM_L1PF=67", "NATIVE_SHAPES": {"o": [8, 1, 0]}}}' 3 \
  2>&1 | grep -v "plugin EP" | tail -n 20 | cut -c1-400
for v in base l1pf36 lazy l1pf36_lazy; do
  case $v in base) d="";; l1pf36) d="-DVLM_L1PF=36";; lazy) d="-DVLM_PICK_LAZY=1";; l1pf36_lazy) d="-DVLM_L1PF=36 -DVLM_PICK_LAZY=1";; esac
  mkdir -p $OUT/hb_$v
  VLM_NATIVE_DEFINES="$d" HB_SHAPES='[[4, 0, 0, 8], [2, 1, 3, 8]]' OUT=$OUT/hb_$v timeout 60 \
    python3 scripts/h200_head_bound_sweep.py --rounds 7 2>&1 | grep -v "plugin EP" | tail -n 4 | cut -c1-400
  mv $OUT/hb_$v/h200_head_bound_sweep.json $OUT/h200_head_bound_${v}_$s7.json 2>/dev/null; rmdir $OUT/hb_$v
done
