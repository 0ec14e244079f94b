#!/usr/bin/env bash
# The H200 run: CUDA tests, the demo, and the benchmark matrix, logs and results under $OUT.
# Usage on the device machine (after the onnxruntime-gpu wheel is installed into /tmp/site):
#   bash scripts/h200.sh tests|bench-tiny|bench-1b
set -o pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 VLMDECODE_CACHE=/tmp/vlmcache
export VLMDECODE_GIT_SHA=${VLMDECODE_GIT_SHA:-$(cat .gitsha 2>/dev/null)}
OUT=${OUT:-/tmp/out}
case "$1" in
  tests)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
    python3 -m pytest -m cuda tests/test_cuda.py tests/test_sampling.py -v -p no:cacheprovider -o addopts="" \
        --junitxml="$OUT/gpu_tests.xml" 2>&1 | cat /tmp/gpu_info.txt - | tee "$OUT/gpu_test_log.txt"
    python3 -m vlmdecode.cli demo --max-new-tokens 24 2>&1 | tee "$OUT/gpu_demo_log.txt"
    ;;
  bench-tiny)
    python3 -m vlmdecode.cli bench run --presets tiny --devices cuda --new-tokens 64 --repeats 5 \
        --out "$OUT" 2>&1 | tail -n 40 | tee /tmp/bench_tiny_log.txt
    mv "$OUT/bench.csv" "$OUT/h200_bench_tiny.csv"; mv "$OUT/bench.json" "$OUT/h200_bench_tiny.json"
    ;;
  bench-1b)
    python3 -m vlmdecode.cli build-fixture --preset gemma3-1b --dtype fp16 --out /tmp/vlmcache/gemma3-1b-gqa-fp16 \
        2>&1 | tail -n 3
    python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 128 1024 4096 \
        --new-tokens 48 --repeats 3 --out "$OUT" 2>&1 | tail -n 40 | tee /tmp/bench_1b_log.txt
    mv "$OUT/bench.csv" "$OUT/h200_bench_gemma3-1b.csv"; mv "$OUT/bench.json" "$OUT/h200_bench_gemma3-1b.json"
    ;;
esac
if [ "$1" = profile ]; then
  python3 -X faulthandler scripts/h200_profile.py > "$OUT/h200_profile_log.txt" 2>&1; echo "profile exit $?"; grep -v "plugin EP" "$OUT/h200_profile_log.txt" | tail -n 40
fi
