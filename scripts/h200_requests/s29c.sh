#!/bin/bash
# issue 16, twenty-ninth session (main at .gitsha; after the 9 staging calls, < 9 min): attention_cl's batches staged
# through shared memory by cp.async (Shapes.attn_stages / attn_stages_global). At context 4096 a full-attention
# layer's keys phase is bound by the bytes a sub-group holds in flight (one register batch ahead); stages hold up to
# ST batches in flight with no registers (167 against 228: attention_cl_stages_ptxas_1a1856e.txt).
# 1. their CUDA tests (bit-equal to the register batches, the SASS and nvcc checks) -> $OUT/h200_attn_stages_tests_<sha>.txt
# 2. the step's timeline at context 4096, base and 4 stages on the full layers -> $OUT/h200_native_timeline_{base,stg4}_ctx4096_<sha>.json
# Ran at 1a1856e; the code is kept as docs/branches/attn-stages.patch (a diff against 6c66838), not on main.
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
timeout 280 python3 -m pytest -m cuda -q -p no:cacheprovider -o addopts="" -rf tests/test_native_kernels.py \
  tests/test_native_cuda.py -k "staged or compiles or read_only or ring_buffer or under_pdl" 2>&1 | grep -v "plugin EP" \
  > "$OUT/h200_attn_stages_tests_$s7.txt"
tail -n 3 "$OUT/h200_attn_stages_tests_$s7.txt"
for v in 'base:{}' 'stg4:{"attn_stages_global": 4}'; do
  OUT="$OUT" timeout 110 python3 scripts/h200_native_timeline.py --context 4096 --shapes "${v#*:}" \
    --tag ${v%%:*}_ctx4096_$s7 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-300
done
