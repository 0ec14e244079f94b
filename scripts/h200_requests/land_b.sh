#!/bin/bash
# producer fold as the default: bench table (native vs device / graph / genai graph), ctx 4096, memory, parity; probe
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
O=$OUT; mkdir -p $O/b
OUT=$O/b timeout 100 python3 scripts/h200_gemv_math_probe.py 2>&1 | tail -n 5
python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 --modes graph device native genai-graph \
  --layouts fused-cuda --new-tokens 48 --repeats 3 --tag h200_native_bench_gemma3-1b --out "$O/b" 2>&1 | grep -v "plugin EP" | tail -n 8
python3 -m vlmdecode.cli bench run --presets tiny --devices cuda --contexts 128 --modes graph device native genai-graph \
  --layouts fused-cuda --new-tokens 64 --repeats 5 --tag h200_native_bench_tiny --out "$O/b" 2>&1 | grep -v "plugin EP" | tail -n 6
OUT=$O/b timeout 240 python3 scripts/h200_native.py --parts provenance,parity_gemma3_1b,timing_gemma3_1b_ctx4096,memory_gemma3_1b 2>&1 | grep -v "plugin EP" | tail -n 12
cd $O/b && tar czf $O/land_b.tgz . && ls
