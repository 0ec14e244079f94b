#!/bin/bash
# issue 16, twenty-seventh session (branch attn-kv-early at .gitsha, after s27b). First the attention tests of
# tests/test_native_cuda.py built with -DVLM_KV_EARLY (VLM_NATIVE_DEFINES, this branch's hook; they include the
# attn_clusters_global cases) -> $OUT/h200_kv_early_glob_tests_<sha>.txt. Then the replayed gemma3-1b step at context
# 1024 with -DVLM_KV_EARLY and with the full-attention layers over 2 clusters (Shapes.attn_clusters_global 2) against
# the default, across processes (scripts/h200_ab.py, rotated order, 3 rounds) -> $OUT/h200_kv_early_ab_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
VLM_NATIVE_DEFINES=-DVLM_KV_EARLY timeout 170 python3 -m pytest tests/test_native_cuda.py -m cuda -q -p no:cacheprovider \
  -o addopts="" -rf -k "attention or pdl_equals" 2>&1 | grep -v "plugin EP" | tee "$OUT/h200_kv_early_glob_tests_$s7.txt" \
  | tail -n 3
OUT="$OUT" timeout 400 python3 scripts/h200_ab.py h200_kv_early_ab_$s7 \
  '{"base": {}, "kv_early": {"VLM_NATIVE_DEFINES": "-DVLM_KV_EARLY"},
    "glob2": {"NATIVE_SHAPES": {"attn_clusters_global": 2}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 12
