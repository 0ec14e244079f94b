#!/bin/bash
# issue 16, prepared in the twenty-fourth session for the next (branch l2pf at .gitsha, or main with
# docs/branches/l2pf.patch applied and committed; after the 7 staging calls, < 7 min): each layer's attention_cl hands
# the copy engine its layer's gate|up rows to prefetch into L2 (Shapes.l2_prefetch: half / all of the gate rows and as
# many up rows), so that DRAM streams gate|up's weights while attention and o wait on latencies. The CUDA tests
# (bit-identical logits with the prefetch; PDL's; the kernels' nvcc and SASS checks), the step's timeline at 0.5 and 1.0
# (at 1.0 beside 32 KB and 512 KB prefetch chunks), and the replayed step across
# processes (h200_ab.py, 3 rounds) -> $OUT/h200_l2pf_ab_<sha>.json (gemma3-1b, context 1024).
set -o pipefail
. scripts/h200_requests/preamble.sh
timeout 200 python3 -m pytest tests/test_native_kernels.py tests/test_native_cuda.py -k "l2_prefetch or pdl_equals or sm90 or \
  read_only_path" -q -p no:cacheprovider -o addopts="" -rf -x 2>&1 | grep -v "plugin EP" | tee "$OUT/h200_l2pf_tests_$s7.txt" | tail -n 4 || exit 1
OUT="$OUT" timeout 100 python3 scripts/h200_native_timeline.py --shapes '{"l2_prefetch": 0.5}' --tag l2pf05_$s7 2>&1 \
  | grep -v "plugin EP" | tail -n 1 | cut -c1-300
# at 1.0, beside the default 128 KB chunks (one process): 32 KB and 512 KB chunks a prefetch instruction
OUT="$OUT" timeout 150 python3 scripts/h200_native_timeline.py --shapes '{"l2_prefetch": 1.0}' --tag l2pf10_$s7 \
  --variants '{"chunk32k": ["-DL2PF_CHUNK=32768"], "chunk512k": ["-DL2PF_CHUNK=524288"]}' 2>&1 \
  | grep -v "plugin EP" | tail -n 1 | cut -c1-300
OUT="$OUT" timeout 300 python3 scripts/h200_ab.py h200_l2pf_ab_$s7 \
  '{"base": {}, "pf05": {"NATIVE_SHAPES": {"l2_prefetch": 0.5}}, "pf10": {"NATIVE_SHAPES": {"l2_prefetch": 1.0}}}' \
  ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 11
