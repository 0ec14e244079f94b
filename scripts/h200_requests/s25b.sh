#!/bin/bash
# issue 16, twenty-fifth session (branch gemv-l2pf at .gitsha; after the staging calls, < 7 min): s25a measured
# attention_cl's L2 prefetch of gate|up slower (16 issuing blocks: their thread 0 stalls, the prefetch lands late).
# Probe: the GEMVs' own blocks (resident across all SMs, launched early under PDL) hand the copy engine their later
# row groups before pdl_wait (-DVLM_SPLIT_L2PF: gate|up's gemv_split; -DVLM_GEMV_L2PF: o, down, qkv; N groups ahead,
# -1 all). The step's timeline with the variants (outputs compared bit for bit with the decoder's graph), then the
# replayed step across processes (NATIVE_DEFINES, 3 rounds) -> $OUT/h200_gemv_l2pf_ab_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 200 python3 scripts/h200_native_timeline.py --tag gemv_l2pf_$s7 --variants \
  '{"split_all": ["-DVLM_SPLIT_L2PF=-1"], "split1": ["-DVLM_SPLIT_L2PF=1"], "gemv_all": ["-DVLM_GEMV_L2PF=-1"],
    "both": ["-DVLM_SPLIT_L2PF=-1", "-DVLM_GEMV_L2PF=-1"]}' 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-400
OUT="$OUT" timeout 330 python3 scripts/h200_ab.py h200_gemv_l2pf_ab_$s7 \
  '{"base": {}, "split_all": {"NATIVE_DEFINES": "-DVLM_SPLIT_L2PF=-1"},
    "both": {"NATIVE_DEFINES": "-DVLM_SPLIT_L2PF=-1 -DVLM_GEMV_L2PF=-1"}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 11
