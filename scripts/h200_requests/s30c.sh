#!/bin/bash
# issue 16, thirtieth session (main at .gitsha; after the 9 staging calls, < 7 min): the live-clusters kernel test
# as fixed after final_tests.sh at c32b5fe (2 failed: at head_dim 16 a live cluster with no key writes the empty
# partial) -> $OUT/h200_live_clusters_test_<sha>.txt; then s30b.sh's A/B (ROUNDS 2).
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/h200_live_clusters_test_$s7.txt"
timeout 120 python3 -m pytest -m cuda -q -p no:cacheprovider -o addopts="" -rf tests/test_native_cuda.py \
  -k "live_clusters" 2>&1 | grep -v "plugin EP" >> "$OUT/h200_live_clusters_test_$s7.txt"
tail -n 2 "$OUT/h200_live_clusters_test_$s7.txt"
ROUNDS=2 bash scripts/h200_requests/s30b.sh
