#!/bin/bash
# issue 16, prepared in the twenty-third session, right after s23f.sh (warm, < 9 min): the gemma3-1b bench table at
# context 1024 with gate|up's new default (gemv_split; graph, device, native with its bounded head, genai graph),
# h200_native.py's context-4096 timing and device memory over 200 generations (native_proof), as s21b.sh ran them.
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
O=$OUT; mkdir -p $O/b
timeout 240 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 --modes graph device \
  native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --tag h200_native_bench_gemma3-1b --out "$O/b" \
  2>&1 | grep -v "plugin EP" | tail -n 6 | cut -c1-400
OUT=$O timeout 180 python3 scripts/h200_native.py --parts provenance,timing_gemma3_1b_ctx4096,memory_gemma3_1b 2>&1 \
  | grep -v "plugin EP" | tail -n 8 | cut -c1-600
mv $O/h200_native.json $O/h200_native_proof_$(cut -c1-7 .gitsha).json 2>/dev/null
ls $O $O/b
