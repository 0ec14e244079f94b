#!/bin/bash
# issue 16, prepared in the twenty-seventh session for the next (main with docs/branches/q-shfl.patch applied and committed, .gitsha that commit; after the 9 staging calls,
# < 6 min). attention_cl's q/k phase waits ~1.4 us after its wait for the q rows (h200_native_timeline_probes_be261dc.json):
# every warp of the 16 blocks loads all G q rows and, for the half-split rotary, each row's partner dims again (64 KB a
# block through L2 at gemma3-1b's shape, L2-to-SM bandwidth-bound if ~64 B a cycle an SM). With the patch each lane loads
# only its own dims and takes the partner dims from lane l ^ LPK/2 by shuffle (or its own other slice at head_dim >=
# 512): half the bytes, the same values. -DVLM_Q_LOADS builds the old loads. (1) the attention CUDA tests and the
# token tests on the patched default (the shuffle) -> $OUT/h200_q_shfl_tests_<sha>.txt; (2) the step's timeline with
# the old loads beside it (stamped, and unstamped replay-timed; logits compared bit for bit with the decoder's graph)
# -> $OUT/h200_native_timeline_q_shfl_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
timeout 200 python3 -m pytest tests/test_native_cuda.py -m cuda -q -p no:cacheprovider -o addopts="" -rf \
  -k "attention or pdl_equals or tokens_equal" 2>&1 | grep -v "plugin EP" | tee "$OUT/h200_q_shfl_tests_$s7.txt" | tail -n 3
OUT="$OUT" timeout 200 python3 scripts/h200_native_timeline.py --tag q_shfl_$s7 --variants \
  '{"q_loads": ["-DVLM_Q_LOADS"], "q_loads_replay": ["-DVLM_Q_LOADS", "nostamps"], "shfl_replay": ["nostamps"]}' \
  2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-500
