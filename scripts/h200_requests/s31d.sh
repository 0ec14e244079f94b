#!/bin/bash
# issue 16, thirty-first session (main at .gitsha; after the 9 staging calls, < 4 min): the Nsight Compute per-kernel
# table of one greedy native step beside onnxruntime's eager step on main, so that the table reads the kernels users
# run (the committed one, h200_native_ncu_gemma3-1b.json, has 2dcb2b4's: attention_cl before its shuffled partner
# dims and live clusters) -> $OUT/h200_native_ncu_gemma3-1b_<sha>.{json,csv}, $OUT/h200_native_ncu_summary_<sha>.txt
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT" /tmp/ncu
OUT=/tmp/ncu timeout 400 python3 scripts/h200_native_ncu.py 2>&1 | grep -v "plugin EP" \
  > "$OUT/h200_native_ncu_summary_$s7.txt"; tail -n 25 "$OUT/h200_native_ncu_summary_$s7.txt" | cut -c1-300
for e in json csv; do cp /tmp/ncu/h200_native_ncu_gemma3-1b.$e "$OUT/h200_native_ncu_gemma3-1b_$s7.$e"; done; ls "$OUT"
