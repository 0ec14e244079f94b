# the lead's final run, part 1: every CUDA test of tests/ on main, coverage counting the CUDA decoders
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
python3 -m pytest -m cuda tests/ --ignore=tests/test_plots.py -q -p no:cacheprovider -o addopts="" -rf \
  --cov=vlmdecode --cov-config=.ci/coverage-gpu.toml --cov-report=term-missing \
  --junitxml="$OUT/h200_gpu_tests.xml" 2>&1 | grep --line-buffered -v "plugin EP" | cat /tmp/gpu_info.txt - > "$OUT/h200_gpu_test_log.txt"
grep -E "^(FAILED|ERROR)|passed|failed|decoders/cuda|native/decoder|^TOTAL" "$OUT/h200_gpu_test_log.txt" | tail -40
