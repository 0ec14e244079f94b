#!/bin/bash
# issue 16, prepared in the thirty-third session (main at .gitsha; after the 9 staging calls, < 7 min): the step's
# kernels on the slow module slot against a fast one, under Nsight Compute's warp-state counters. In one process the
# decoder's first module is slow and a module loaded after it fast; freed, its place is taken by the next load, which
# is slow again (h200_module_freed_reloads_c69763e.json). Which kernels lose the 5-10 us, and waiting for
# what (no_instruction: code fetch; long_scoreboard: data)? Serialized kernels (ncu), caches as found.
# -> $OUT/h200_native_stalls_slot_a_<sha>.json (the first module), $OUT/h200_native_stalls_slot_b_<sha>.json (fresh)
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 250 python3 scripts/h200_native_stalls.py --tag slot_a_$s7 2>&1 | grep -v "plugin EP" \
  | tail -n 8 | cut -c1-300
NATIVE_REBUILD=fresh OUT="$OUT" timeout 250 python3 scripts/h200_native_stalls.py --tag slot_b_$s7 2>&1 \
  | grep -v "plugin EP" | tail -n 8 | cut -c1-300
