#!/bin/bash
# producer fold as the default: every CUDA test with coverage, then the fold set at the new defaults
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
timeout 320 bash .gpuwt/final_tests.sh
OUT=$OUT timeout 250 python3 scripts/h200_native_pdl.py --set fold 2>&1 | grep -v "plugin EP" | tail -n 3
