#!/bin/bash
# issue 16, prepared in the twenty-ninth session for the next (main at .gitsha; after the 9 staging calls, < 5 min):
# attention_cl in 16 warps a block (attn_threads 512, allowed since the twenty-ninth session). Its phases after the
# wait are dependent arithmetic and shuffles at 8 warps an SM (docs/native_decoder.md); 16 warps of one key a batch
# (127 registers, no spills: attention_cl_w16_ptxas.txt) hold the same keys with twice the warps to hide them, at
# twice the q-row loads a block.
# 1. the attention kernel tests (a 512-thread case added) -> $OUT/h200_attn_w16_tests_<sha>.txt
# 2. the step's timeline at context 1024, base and 16 warps -> $OUT/h200_native_timeline_{base,w16b1}_<sha>.json
# Then s30b.sh.
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/h200_attn_w16_tests_$s7.txt"
timeout 200 python3 -m pytest -m cuda -q -p no:cacheprovider -o addopts="" -rf tests/test_native_cuda.py \
  -k "norm_rotary_append_window or under_pdl or cluster_attention_follows" 2>&1 | grep -v "plugin EP" \
  >> "$OUT/h200_attn_w16_tests_$s7.txt"
tail -n 3 "$OUT/h200_attn_w16_tests_$s7.txt"
for v in 'base:{}' 'w16b1:{"attn_threads": 512, "attn_batch": 1}'; do
  OUT="$OUT" timeout 100 python3 scripts/h200_native_timeline.py --shapes "${v#*:}" --tag ${v%%:*}_$s7 2>&1 \
    | grep -v "plugin EP" | tail -n 1 | cut -c1-300
done
