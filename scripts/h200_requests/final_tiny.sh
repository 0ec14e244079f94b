#!/bin/bash
# main at .gitsha: the tiny bench table with 9 rounds (graph, device, native, genai graph), then context 4096
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
O=$OUT; mkdir -p $O/b $O/c
timeout 200 python3 -m vlmdecode.cli bench run --presets tiny --devices cuda --contexts 128 --modes graph device native \
  genai-graph --layouts fused-cuda --new-tokens 64 --repeats 9 --tag h200_native_bench_tiny --out "$O/b" 2>&1 \
  | grep -v "plugin EP" | tail -n 5 | cut -c1-300
OUT=$O/c timeout 200 python3 scripts/h200_native.py --parts provenance,timing_gemma3_1b_ctx4096 2>&1 \
  | grep -v "plugin EP" | tail -n 4
