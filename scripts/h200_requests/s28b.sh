#!/bin/bash
# issue 16, prepared in the twenty-seventh session for the next (main with docs/branches/q-shfl.patch applied and committed, as s28a; right after it): the
# replayed gemma3-1b step at context 1024, the branch's shuffled partner dims against the old loads (-DVLM_Q_LOADS
# through VLM_NATIVE_DEFINES, the patch's hook), across processes (scripts/h200_ab.py, rotated order, ROUNDS rounds)
# -> $OUT/h200_q_shfl_ab_<sha>.json. A win in every round, with s28a's tests passed, makes it main's code (drop the
# define and the hook).
set -o pipefail
. scripts/h200_requests/preamble.sh
OUT="$OUT" timeout 560 python3 scripts/h200_ab.py h200_q_shfl_ab_$s7 \
  '{"q_loads": {"VLM_NATIVE_DEFINES": "-DVLM_Q_LOADS"}, "shfl": {}}' ${ROUNDS:-5} 2>&1 | grep -v "plugin EP" | tail -n 12
