#!/bin/bash
# issue 16, prepared in the twentieth session for the next (main at .gitsha; after the 7 staging calls, < 8 min): every
# CUDA test with GPU coverage (the bounded head's included; the twentieth session ran only its -k subset,
# h200_bounded_head_tests.txt), then the bench tables of both presets with native's bounded head (graph, device, native,
# genai graph) for the README table. Then s21b.sh back to back.
if [ ! -d /tmp/site/onnxruntime ]; then
  cat /root/parts/part* > /tmp/$(cat .gpu/genai/ORT_WHEEL_NAME) && python3 -m pip install -q --no-index --no-deps \
    --target /tmp/site /tmp/onnxruntime_gpu-*.whl .gpu/genai/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
O=$OUT; mkdir -p $O/b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
COV=$(python3 -c "import pytest_cov" 2>/dev/null && echo "--cov=vlmdecode --cov-config=.ci/coverage-gpu.toml --cov-report=term-missing")
timeout 330 python3 -m pytest -m cuda tests/ --ignore=tests/test_plots.py -q -p no:cacheprovider -o addopts="" -rf $COV \
  --junitxml="$O/h200_gpu_tests.xml" 2>&1 | grep -v "plugin EP" | cat /tmp/gpu_info.txt - > "$O/h200_gpu_test_log.txt"
grep -E "^(FAILED|ERROR)|passed|failed|native/decoder|native/bounded|^TOTAL" "$O/h200_gpu_test_log.txt" | tail -20
timeout 100 python3 -m vlmdecode.cli bench run --presets tiny --devices cuda --contexts 128 --modes graph device native \
  genai-graph --layouts fused-cuda --new-tokens 64 --repeats 5 --tag h200_native_bench_tiny --out "$O/b" 2>&1 \
  | grep -v "plugin EP" | tail -n 6 | cut -c1-400
