#!/bin/bash
# issue 16, PREPARED (not run): branch lookahead (a2ab182 or later), native's generate with the lookahead loop as
# its default. Run through `bash .gpuwt/req.sh lookahead` from a snapshot of the branch (.gpuwt/lookahead, made as
# attn-pro's; VLMDECODE_GIT_SHA=$(cat .gpuwt/lookahead.sha)), ~7 min on a warm machine with the gemma3-1b fixture
# cached. 1. the CUDA tests of the native decoder (the files that build one; the branch changes which loop the proof
# tests read logits through; the other CUDA files build no native decoder); 2. the bench table
# (gemma3-1b, context 1024: graph, device, native, genai graph; native is now the lookahead loop); 3. context 4096,
# native's default beside its plain loop. Land only if 1 is green and 2/3 show the gain side by side.
export PYTHONUNBUFFERED=1
O=$OUT; mkdir -p $O/b $O/c
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
timeout 230 python3 -m pytest -m cuda tests/test_native_cuda.py tests/test_native_prefill_cuda.py -q -p no:cacheprovider \
  -o addopts="" -rf \
  --junitxml="$O/h200_gpu_tests_lookahead.xml" 2>&1 | grep -v "plugin EP" | cat /tmp/gpu_info.txt - \
  > "$O/h200_gpu_test_log_lookahead.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/h200_gpu_test_log_lookahead.txt" | tail -12
timeout 170 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 --modes graph device \
  native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --tag h200_native_bench_gemma3-1b --out "$O/b" \
  2>&1 | grep -v "plugin EP" | tail -n 8
OUT=$O/c timeout 150 python3 scripts/h200_native.py --parts provenance,timing_gemma3_1b_ctx4096 2>&1 \
  | grep -v "plugin EP" | tail -n 6
ls -R $O | head -30
