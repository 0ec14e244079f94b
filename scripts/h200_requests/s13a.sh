#!/bin/bash
# issue 16, prepared in session 13 (no machine was lent), branch fold-flat at .gitsha, from the repo root with
# .gpuwt/ holding install.sh. Where do the GEMV prologues' ~2 us after pdl_wait go (qkv, gate|up: the fold; o, down:
# a plain copy), and do the flat variants shorten them? Stamped builds side by side: main's code with the fold
# probes (-DVLM_PROBE_FOLD: thread 0's loads in / first reduction / second / vector formed), the flat one-part fold
# of gate|up (-DVLM_FOLD_FLAT), the flat fold of down's 8 parts for qkv and the head (-DVLM_FOLD_FLAT8) and the
# flat plain vector of o and down (-DVLM_VEC_FLAT), with and without probes, and the PF 0
# GEMVs' first row group pulled into L2 before the wait (-DVLM_GEMV_L2PF); then the variants unstamped
# ("nostamps") beside the decoder's own graph, all replay-timed interleaved, logits vs the decoder graph (bit-equal
# expected: max abs 0.0). The variants' CUDA tests: s13b.sh. File: h200_native_timeline_fold.json
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
F='"-DVLM_FOLD_FLAT", "-DVLM_FOLD_FLAT8", "-DVLM_VEC_FLAT"'
V='{"probe": ["-DVLM_PROBE_FOLD"], "flat": ['"$F"'], "flat_probe": ['"$F"', "-DVLM_PROBE_FOLD"],
  "l2pf": ["-DVLM_GEMV_L2PF"], "flat1_plain": ["nostamps", "-DVLM_FOLD_FLAT"],
  "flat8_plain": ["nostamps", "-DVLM_FOLD_FLAT8"], "vec_plain": ["nostamps", "-DVLM_VEC_FLAT"],
  "flat_plain": ["nostamps", '"$F"'], "l2pf_plain": ["nostamps", "-DVLM_GEMV_L2PF"],
  "all_plain": ["nostamps", '"$F"', "-DVLM_GEMV_L2PF"]}'
OUT=$OUT timeout 520 python3 scripts/h200_native_timeline.py --variants "$V" --tag fold \
  2>&1 | grep -v "plugin EP" | tail -n 12 | cut -c1-1200
