#!/bin/bash
# issue 16, thirty-second session, branch stage-q (the tree at .gitsha; after the 9 staging calls, < 9 min): the
# cold-reader probe's --stores run put the cost of attention_cl's first phase on its reads, not on qkv's stores (every
# warp loading the G q rows: ~1 us; a float4 a thread once a block: ~0.35). attention_cl<..., SQ 1>
# (Shapes.attn_stage_q) stages them so. (1) its CUDA tests beside the default's (bits equal, PDL, the step)
# -> $OUT/h200_stage_q_tests_<sha>.txt; (2) the replayed step at context 1024 across processes, base vs stage_q,
# rotated, ROUNDS rounds -> $OUT/h200_stage_q_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/h200_stage_q_tests_$s7.txt"
timeout 280 python3 -m pytest -m cuda -q -p no:cacheprovider -o addopts="" -rf tests/test_native_cuda.py \
  -k "attention or stage_q or sector" 2>&1 | grep -v "plugin EP" >> "$OUT/h200_stage_q_tests_$s7.txt"
tail -n 3 "$OUT/h200_stage_q_tests_$s7.txt"
OUT="$OUT" timeout 290 python3 scripts/h200_ab.py h200_stage_q_ab_$s7 \
  '{"base": {}, "stage_q": {"NATIVE_SHAPES": {"attn_stage_q": true}}}' ${ROUNDS:-4} 2>&1 | grep -v "plugin EP" \
  | tail -n 10
