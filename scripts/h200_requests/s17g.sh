#!/bin/bash
# issue 16, seventeenth session, branch tlb-warm (at .gitsha): what does a kernel wait for after pdl_wait? A
# dependent read takes 0.47 us in o but qkv's loads are in only 1.41 us after the wait (h200_native_timeline_fold_
# 484453d.json). Two builds through VLMDECODE_DEFINES, A/B'd against the default across processes (scripts/h200_ab.py,
# 3 rounds, rotated): -DVLM_TLB_WARM (thread 0 prefetches the first and last line of every buffer read or written
# after the wait: warm address translations), -DVLM_L2_NORMS (the folding GEMVs prefetch their norm weights into L2,
# evict_last) -> h200_tlb_warm_ab_<sha>.json
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 330 python3 scripts/h200_ab.py h200_tlb_warm_ab_$(cut -c1-7 .gitsha) \
  '{"base": {}, "tlb": {"VLMDECODE_DEFINES": "-DVLM_TLB_WARM"}, "l2n": {"VLMDECODE_DEFINES": "-DVLM_L2_NORMS"}}' 3 \
  2>&1 | grep -v "plugin EP" | tail -n 11 | cut -c1-400
