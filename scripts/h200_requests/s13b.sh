#!/bin/bash
# issue 16, prepared in session 13, branch fold-flat at .gitsha (after s13a.sh, same warm machine): the prologue
# variants' CUDA tests (tests/test_native_fold_flat_cuda.py: each build bit-equal to main's and to float64) and
# test_native_cuda.py's GEMV tests. File: h200_gpu_test_log_fold_<sha>.txt
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
L=$OUT/h200_gpu_test_log_fold_$(cut -c1-7 .gitsha).txt
timeout 400 python3 -m pytest -m cuda tests/test_native_fold_flat_cuda.py tests/test_native_cuda.py -k "flat or gemv or l2_first" -q \
  -p no:cacheprovider -o addopts="" -rf 2>&1 | grep -v "plugin EP" | cat /tmp/gpu_info.txt - > $L
grep -E "^(FAILED|ERROR)|passed|failed" $L | tail -8
