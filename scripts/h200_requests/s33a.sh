#!/bin/bash
# issue 16, prepared in the thirty-second session (main at .gitsha; after the 9 staging calls, < 8 min): is a step
# rebuilt on a freshly loaded kernel module faster than the decoder's first build? The s32 A/Bs put every variant
# with a new template instance (a second module) 1.3-1.8% ahead of the base, whichever code it held. Same shapes,
# across processes, rotated, 2 rounds: first build / rebuilt on the cached module / rebuilt on a module compiled and
# loaded again / the first build after a one-kernel module was loaded / the first build with eager module loading
# -> $OUT/h200_module_order_ab_<sha>.json
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 450 python3 scripts/h200_ab.py h200_module_order_ab_$s7 \
  '{"first": {}, "same": {"NATIVE_REBUILD": "same"}, "fresh": {"NATIVE_REBUILD": "fresh"},
    "dummy_first": {"NATIVE_DUMMY_MODULE": "1"}, "eager": {"CUDA_MODULE_LOADING": "EAGER"}}' ${ROUNDS:-2} 2>&1 \
  | grep -v "plugin EP" | tail -n 13
