#!/bin/bash
# issue 16, thirty-fifth session (main at .gitsha; after the 9 staging calls; < 5 min): gate|up as gemv_tiled over
# its tiled copy (Shapes.gate_up_tiled), part 1: its CUDA tests (the kernel against float64 at gemma3-1b's shape and
# smaller ones, the captured step's tokens against the default step's), then the step's timeline without and with it
# -> $OUT/h200_tiled_gemv_tests_<sha>.txt, $OUT/h200_native_timeline_{base,tiled4}_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
python3 -m pytest -m cuda tests/test_native_cuda.py -k "tiled or gate_up_gelu" -q -p no:cacheprovider -o addopts="" \
  -rf 2>&1 | grep -v "plugin EP" > "$OUT/h200_tiled_gemv_tests_$s7.txt"
tail -n 4 "$OUT/h200_tiled_gemv_tests_$s7.txt"
OUT="$OUT" timeout 150 python3 scripts/h200_native_timeline.py --tag base_$s7 2>&1 | grep -v "plugin EP" | tail -n 3
OUT="$OUT" timeout 150 python3 scripts/h200_native_timeline.py --shapes '{"gate_up_tiled": [4, 8, 4]}' \
  --tag tiled4_$s7 2>&1 | grep -v "plugin EP" | tail -n 3
