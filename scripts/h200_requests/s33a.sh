#!/bin/bash
# issue 16, prepared in the thirty-second session (main at .gitsha; after the 9 staging calls, < 9 min): is a step
# rebuilt on a freshly loaded kernel module faster than the decoder's first build? The s32 A/Bs put every variant
# with a new template instance (a second module) 1.3-1.8% ahead of the base, whichever code it held. Same shapes,
# across processes, rotated, 2 rounds: first build / rebuilt on the cached module / rebuilt on a module compiled and
# loaded again / the first build after a one-kernel module was loaded / the first build with eager module loading;
# then the first module and three reloads in one process
# -> $OUT/h200_module_order_ab_<sha>.json, $OUT/h200_module_reloads_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 450 python3 scripts/h200_ab.py h200_module_order_ab_$s7 \
  '{"first": {}, "same": {"NATIVE_REBUILD": "same"}, "fresh": {"NATIVE_REBUILD": "fresh"},
    "dummy_first": {"NATIVE_DUMMY_MODULE": "1"}, "eager": {"CUDA_MODULE_LOADING": "EAGER"}}' ${ROUNDS:-2} 2>&1 \
  | grep -v "plugin EP" | tail -n 13
# then one process measuring the step on its first module and on 3 more, each loaded afresh (< 1 min)
OUT="$OUT/reloads" NATIVE_RELOADS=3 timeout 120 python3 scripts/h200_native_replay.py 2>&1 | grep -v "plugin EP" \
  | tail -n 4 && mv "$OUT/reloads/h200_native_replay.json" "$OUT/h200_module_reloads_$s7.json"
