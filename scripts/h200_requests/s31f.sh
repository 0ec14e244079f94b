#!/bin/bash
# issue 16, thirty-first session (main at .gitsha; CuPy only, no staging, < 1 min): the cold-reader probe's --stores
# cases (the writer's rows as gemv stores them or in whole sectors; read by every warp or each thread its own)
# -> $OUT/h200_cold_reader_probe_stores.json
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 VLMDECODE_GIT_SHA=$(cat .gitsha)
mkdir -p "$OUT"
OUT="$OUT" timeout 120 python3 scripts/h200_cold_reader_probe.py --stores 2>&1 | tail -n 10 | cut -c1-300
