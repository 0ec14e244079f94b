#!/bin/bash
# issue 16, session 16, main at .gitsha (every step kernel's parameter touch): the replayed step's timeline (stamped
# build, per-class spans and attention_cl's phases) and the Nsight Compute per-kernel table beside onnxruntime's,
# so that the layer budget and the kernel table read the current code -> h200_native_timeline_<sha>.json,
# h200_native_ncu_gemma3-1b_<sha>.{json,csv}, h200_native_ncu_summary_<sha>.txt
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
OUT=$OUT timeout 260 python3 scripts/h200_native_timeline.py --tag $s7 2>&1 | grep -v "plugin EP" | tail -n 30 | cut -c1-300
mkdir -p /tmp/ncu && OUT=/tmp/ncu timeout 250 python3 scripts/h200_native_ncu.py 2>&1 | grep -v "plugin EP" \
  > $OUT/h200_native_ncu_summary_$s7.txt; tail -n 25 $OUT/h200_native_ncu_summary_$s7.txt | cut -c1-300
for e in json csv; do cp /tmp/ncu/h200_native_ncu_gemma3-1b.$e $OUT/h200_native_ncu_gemma3-1b_$s7.$e; done; ls -la $OUT
