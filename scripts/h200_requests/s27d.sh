#!/bin/bash
# issue 16, twenty-seventh session's last device minutes (branch q-shfl at .gitsha = ae82f57: main 60bfc5b with docs/branches/q-shfl.patch; after the 9 staging calls): the
# kernel-level attention tests and the PDL test on the branch's shuffled partner dims -> $OUT/h200_q_shfl_kernel_tests_<sha>.txt
set -o pipefail
. scripts/h200_requests/preamble.sh
timeout 150 python3 -m pytest tests/test_native_cuda.py -m cuda -q -p no:cacheprovider -o addopts="" -rf \
  -k "attention_cl or attention_norm or pdl_equals" 2>&1 | grep -v "plugin EP" | tee "$OUT/h200_q_shfl_kernel_tests_$s7.txt" | tail -n 3
