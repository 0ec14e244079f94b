#!/bin/bash
# issue 16, session 16, main at .gitsha (every step kernel touches its parameters before pdl_wait: 438d351, 74509b6, 6bfada1): every CUDA test with GPU
# coverage, then the tiny bench table (graph, device, native, genai graph). Then s16d.sh back to back.
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
O=$OUT; mkdir -p $O/b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
timeout 330 python3 -m pytest -m cuda tests/ --ignore=tests/test_plots.py -q -p no:cacheprovider -o addopts="" -rf \
  --cov=vlmdecode --cov-config=.ci/coverage-gpu.toml --cov-report=term-missing \
  --junitxml="$O/h200_gpu_tests.xml" 2>&1 | grep -v "plugin EP" | cat /tmp/gpu_info.txt - > "$O/h200_gpu_test_log.txt"
grep -E "^(FAILED|ERROR)|passed|failed|decoders/cuda|decoders/token_ring|native/decoder|native/loop|^TOTAL" "$O/h200_gpu_test_log.txt" | tail -20
timeout 120 python3 -m vlmdecode.cli bench run --presets tiny --devices cuda --contexts 128 --modes graph device native \
  genai-graph --layouts fused-cuda --new-tokens 64 --repeats 5 --tag h200_native_bench_tiny --out "$O/b" 2>&1 \
  | grep -v "plugin EP" | tail -n 6 | cut -c1-400
