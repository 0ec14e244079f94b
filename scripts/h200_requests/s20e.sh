#!/bin/bash
# issue 16, session 20, right after s20d.sh (warm): scripts/h200_bounded_head.py -- gemma3-1b fused-cuda, the bounded
# vs the full LM head (tokens over 200 steps, replayed greedy step, head kernels, per token through the pipeline beside
# device and onnxruntime-genai graph) at contexts 1024 and 4096 -> $OUT/h200_bounded_head.json
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 570 python3 scripts/h200_bounded_head.py --contexts 1024 4096 --rounds 5 2>&1 | grep -v "plugin EP" \
  | tail -n 30 | cut -c1-600
