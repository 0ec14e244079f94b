#!/bin/bash
# issue 16, twenty-fourth session (main at .gitsha; after the staging calls, < 5 min): the Nsight Compute per-kernel
# table of one greedy native step (the bounded head and gate|up's gemv_split, the defaults since the last table at
# b29d6b2) beside onnxruntime's -> h200_native_ncu_gemma3-1b_<sha>.{json,csv}, h200_native_ncu_summary_<sha>.txt
. scripts/h200_requests/preamble.sh
mkdir -p /tmp/ncu && OUT=/tmp/ncu timeout 280 python3 scripts/h200_native_ncu.py 2>&1 | grep -v "plugin EP" \
  > $OUT/h200_native_ncu_summary_$s7.txt; tail -n 25 $OUT/h200_native_ncu_summary_$s7.txt | cut -c1-300
for e in json csv; do cp /tmp/ncu/h200_native_ncu_gemma3-1b.$e $OUT/h200_native_ncu_gemma3-1b_$s7.$e; done; ls -la $OUT
