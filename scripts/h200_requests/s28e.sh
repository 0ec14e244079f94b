#!/bin/bash
# issue 16, twenty-eighth session, right after s28d.sh (warm, the same tree): every CUDA test of tests/ with coverage
# counting the CUDA decoders (final_tests.sh) -> $OUT/h200_gpu_test_log.txt, $OUT/h200_gpu_tests.xml.
set -o pipefail
. scripts/h200_requests/preamble.sh
timeout 560 bash scripts/h200_requests/final_tests.sh
