#!/usr/bin/env bash
# issue 16, branch attn-o (Shapes.attn_o: o's projection folded into attention_cl). NOT run on a GPU yet.
# Snapshot: mkdir -p .gpuwt/attn-o && git -C /work/wt/attn-o archive <sha> -- . ':!tests/data/exported' | tar -x -C .gpuwt/attn-o
# then (after staging): bash .gpuwt/install.sh && export VLMDECODE_GIT_SHA=<branch sha> && bash .gpuwt/req.sh attn-o
# with this file copied to .gpuwt/attn-o.sh. ~4 min incl. the gemma3-1b fixture. Files under $OUT (<= 8 return).
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pytest -m cuda tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" -rA \
  -k "attention_with_o or cluster_attention or attention_cl or native_pdl or tokens_equal_onnx" 2>&1 \
  | grep -v "plugin EP" | tee "$OUT/attn_o_tests.txt" | tail -n 6
OUT="$OUT" timeout 250 python3 scripts/h200_native_pdl.py --set attn_o 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-1500
OUT="$OUT" timeout 120 python3 scripts/h200_native_timeline.py --shapes '{"attn_o": true}' --tag attn_o 2>&1 \
  | grep -v "plugin EP" | sed -n '/classes_us/,/attention_phases/p' | tr -d ' \n' | cut -c1-900; echo
