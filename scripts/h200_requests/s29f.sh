#!/bin/bash
# issue 16, twenty-ninth session (main at .gitsha; after the 9 staging calls, < 9 min): attention_cl's live clusters.
# The grid holds the clusters the KV capacity needs (Shapes.attn_clusters_global "auto": one per attn_cluster_keys
# = 2048 keys), and at each position only those its visible keys need work; the others exit at once.
# 1. the CUDA tests of attention_cl and of the step's cluster variants -> $OUT/h200_live_clusters_tests_<sha>.txt
# 2. across processes at context 4096 (capacity 4144: 3 clusters in the grid, all 3 live at 4097 keys): base against auto
#    -> $OUT/h200_live_clusters_ctx4096_ab_<sha>.json
# (3 is s29g.sh)
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/h200_live_clusters_tests_$s7.txt"
timeout 200 python3 -m pytest -m cuda -q -p no:cacheprovider -o addopts="" -rf tests/test_native_kernels.py \
  tests/test_native_cuda.py -k "live_clusters or cluster_attention_follows or compiles or read_only or ring_buffer or under_pdl" \
  2>&1 | grep -v "plugin EP" >> "$OUT/h200_live_clusters_tests_$s7.txt"
tail -n 3 "$OUT/h200_live_clusters_tests_$s7.txt"
V='{"base": {}, "auto": {"NATIVE_SHAPES": {"attn_clusters_global": "auto"}}}'
OUT="$OUT" NATIVE_CONTEXT=4096 timeout 330 python3 scripts/h200_ab.py h200_live_clusters_ctx4096_ab_$s7 "$V" ${ROUNDS:-3} \
  2>&1 | grep -v "plugin EP" | tail -n 1
