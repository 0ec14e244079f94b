#!/bin/bash
# issue 16, session 12, branch gemv-early at .gitsha: the stamped step with the early row-group loads beside
# -DVLM_GEMV_LATE (the loop before), context 1024, then the GEMV and native-step CUDA tests (test_native_cuda.py
# without its attention-kernel grids, which the change does not touch). Files: h200_native_timeline_gemv_early.json,
# h200_gpu_test_log_gemv_<sha>.txt
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 170 python3 scripts/h200_native_timeline.py --variants '{"late": ["-DVLM_GEMV_LATE"]}' \
  --tag gemv_early 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-1500
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
L=$OUT/h200_gpu_test_log_gemv_$(cut -c1-7 .gitsha).txt
timeout 200 python3 -m pytest -m cuda tests/test_native_cuda.py -k "not attention_norm_rotary and not ring_buffer" -q \
  -p no:cacheprovider -o addopts="" -rf 2>&1 | grep -v "plugin EP" | cat /tmp/gpu_info.txt - > $L
grep -E "^(FAILED|ERROR)|passed|failed" $L | tail -8
