#!/usr/bin/env bash
# The H200 run: CUDA tests, the demo, and the benchmark matrix, logs and results under $OUT.
# Usage on the device machine (after the onnxruntime-gpu wheel is installed into /tmp/site):
#   bash scripts/h200.sh tests|native-tests|native|native-ncu|native-proof|host-overhead|graph-memory|bench-tiny|bench-1b|bench-1b-matrix|ttft-1b|
#        ttft-cpu|kernels-warm|profile   (REPEATS=N: bench-1b / ttft rounds)
set -o pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 VLMDECODE_CACHE=/tmp/vlmcache
export VLMDECODE_GIT_SHA=${VLMDECODE_GIT_SHA:-$(cat .gitsha 2>/dev/null)}
OUT=${OUT:-/tmp/out}
case "$1" in
  tests)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
    # coverage with the CUDA-only decoders counted (.ci/coverage-gpu.toml), when pytest-cov is installed
    COV=$(python3 -c "import pytest_cov" 2>/dev/null && echo "--cov=vlmdecode --cov-config=.ci/coverage-gpu.toml \
--cov-report=term-missing")
    python3 -m pytest -m cuda tests/test_cuda.py tests/test_sampling.py tests/test_prompt_path_cuda.py \
        tests/test_host_step_cuda.py -v \
        -p no:cacheprovider -o addopts="" $COV \
        --junitxml="$OUT/gpu_tests.xml" 2>&1 | cat /tmp/gpu_info.txt - | tee "$OUT/gpu_test_log.txt"
    python3 -m vlmdecode.cli demo --max-new-tokens 24 2>&1 | tee "$OUT/gpu_demo_log.txt"
    ;;
  native-tests)  # the native decoder's CUDA tests
    python3 -m pytest -m cuda tests/test_native_cuda.py -v -p no:cacheprovider -o addopts="" \
        --junitxml="$OUT/native_tests.xml" 2>&1 | tee "$OUT/native_test_log.txt" | tail -n 60
    ;;
  native)  # the native decoder's checks and timings, tiny + gemma3-1b (< 8 min; $OUT/h200_native.json)
    python3 scripts/h200_native.py 2>&1 | grep -v "plugin EP"
    ;;
  native-ncu)  # Nsight Compute table of one native gemma3-1b step beside onnxruntime's (~1 min with the fixture cached)
    OUT="$OUT" python3 scripts/h200_native_ncu.py 2>&1 | grep -v "plugin EP"
    ;;
  native-proof)  # gemma3-1b at context 4096 and device memory over 200 generations ($OUT/h200_native.json)
    OUT="$OUT" python3 scripts/h200_native.py --parts timing_gemma3_1b_ctx4096,memory_gemma3_1b 2>&1 | grep -v "plugin EP"
    ;;
  host-overhead)  # the loop's per-token time vs the replayed step, graph and device, tiny (#13: graph <= 1.3x)
    BEFORE=$([ -f data/results/h200_host_overhead_tiny.json ] && echo "--before data/results/h200_host_overhead_tiny.json")
    python3 scripts/h200_host_overhead.py "$OUT/h200_host_overhead_tiny.json" $BEFORE 2>&1 | grep -v "plugin EP"
    ;;
  graph-memory)
    python3 scripts/h200_graph_memory.py "$OUT/h200_graph_memory.json" 2>&1 | grep -v "plugin EP"
    ;;
  bench-tiny)
    python3 -m vlmdecode.cli bench run --presets tiny --devices cuda --new-tokens 64 --repeats 5 \
        --layouts unfused fused fused-cuda --tag h200_bench_tiny --out "$OUT" 2>&1 | tail -n 40
    ;;
  bench-1b)
    # the modes the targets name, every layout, side by side in one process
    python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 128 1024 \
        --modes graph device tokenid-graph genai-graph --layouts unfused fused fused-cuda \
        --new-tokens 48 --repeats ${REPEATS:-3} --tag h200_bench_gemma3-1b --out "$OUT" 2>&1 | grep -v "plugin EP" | tail -n 40
    ;;
  bench-1b-matrix)
    # every mode (naive .. genai) at contexts 128, 1024, 4096 on the fastest layout
    python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --layouts fused-cuda \
        --new-tokens 48 --repeats ${REPEATS:-3} --tag h200_matrix_gemma3-1b --out "$OUT" 2>&1 \
        | grep -v "plugin EP" | tail -n 30
    ;;
  ttft-1b)
    # time to first token by phase: 1024-token text prompt and a 256-soft-token image prompt, every CUDA mode
    # beside onnxruntime-genai eager/graph on the same folder, ids and pixel_values (vlmdecode.ttft)
    python3 -m vlmdecode.cli bench run --ttft --presets gemma3-1b --devices cuda --layouts fused-cuda \
        --repeats ${REPEATS:-10} --tag h200_ttft_gemma3-1b --out "$OUT" 2>&1 | grep -v "plugin EP" | tail -n 30
    ;;
  ttft-cpu)
    # the same on the host CPU, small preset (text 256 and 1024 tokens, a 49-soft-token image prompt)
    python3 -m vlmdecode.cli bench run --ttft --presets small --devices cpu --repeats ${REPEATS:-5} \
        --tag h200_ttft_small_cpu --out "$OUT" 2>&1 | grep -v "plugin EP" | tail -n 20
    ;;
  kernels-warm)
    # the replayed fused-cuda step at the bench's capacity; then per-kernel times of the same step
    # (ncu, caches and clocks as found)
    python3 scripts/h200_step.py "$OUT/h200_step_cap1088.json" 2>&1 | grep -v "plugin EP"
    timeout 200 /usr/local/cuda/bin/ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
      --cache-control none --clock-control none --log-file /tmp/kernels_fused-cuda_cap1088_warm.csv \
      python3 scripts/h200_kernels.py run fused-cuda 1088 > /tmp/ncu_warm.log 2>&1
    echo "ncu exit $?"; grep -v "plugin EP" /tmp/ncu_warm.log | tail -n 3
    python3 scripts/h200_kernels.py summarize "$OUT/h200_kernels_warm.json" /tmp/kernels_fused-cuda_cap1088_warm.csv
    ;;
esac
if [ "$1" = profile ]; then
  timeout 300 python3 -X faulthandler scripts/h200_profile.py > "$OUT/h200_profile_log.txt" 2>&1
  echo "profile exit $?"; grep -v "plugin EP" "$OUT/h200_profile_log.txt" | tail -n 12
  for layout in unfused fused-cuda; do  # per-kernel GPU time of one eager step (Nsight Compute)
    timeout 100 /usr/local/cuda/bin/ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
      --log-file "/tmp/kernels_$layout.csv" python3 scripts/h200_kernels.py run $layout > /tmp/ncu_$layout.log 2>&1
    echo "ncu $layout exit $?"; grep -v "plugin EP" /tmp/ncu_$layout.log | tail -n 3
  done
  python3 scripts/h200_kernels.py summarize "$OUT/h200_kernels.json" /tmp/kernels_*.csv 2>&1 | tail -n 6
fi
