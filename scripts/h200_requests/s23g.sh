#!/bin/bash
# issue 16, prepared in the twenty-third session, right after s23f.sh (warm, < 9 min): the gemma3-1b bench table at
# context 1024 with gate|up's new default (gemv_split), h200_native.py's context-4096 timing and device memory over
# 200 generations (native_proof): exactly what s21b.sh runs, at .gitsha.
exec bash scripts/h200_requests/s21b.sh
