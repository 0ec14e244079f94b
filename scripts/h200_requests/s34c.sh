#!/bin/bash
# issue 16, prepared in the thirty-third session (main at .gitsha; CuPy only, < 3 min): does a module's place change
# its kernels' speed with nothing of the decoder in the process? A layer-sized module (5 kernels of 32 KB of
# straight-line code), its copies loaded one after another with the one before let go (the step alternated so), then
# all held; and a one-kernel 64 KB module let go the same way
# -> $OUT/h200_module_place_probe_{free,held,free_64k}_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 100 python3 scripts/h200_module_place_probe.py --tag free_$s7 2>&1 | tail -n 8
OUT="$OUT" timeout 100 python3 scripts/h200_module_place_probe.py --held --tag held_$s7 2>&1 | tail -n 8
OUT="$OUT" timeout 100 python3 scripts/h200_module_place_probe.py --chain 1 --kb 64 --tag free_64k_$s7 2>&1 | tail -n 8
