#!/bin/bash
# issue 16, session 12, second call (warm): the CUDA test files that 40a3f0b (TokenRing.loop_order) touched, at
# .gitsha. File: h200_gpu_test_log_native_<sha>.txt
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
L=$OUT/h200_gpu_test_log_native_$(cut -c1-7 .gitsha).txt
timeout 300 python3 -m pytest -m cuda tests/test_native_cuda.py tests/test_native_prefill_cuda.py -q -p no:cacheprovider \
  -o addopts="" -rf 2>&1 | grep -v "plugin EP" | cat /tmp/gpu_info.txt - > $L
grep -E "^(FAILED|ERROR)|passed|failed" $L | tail -8
