#!/bin/bash
# issue 16, prepared in the seventeenth session for the next (main at .gitsha; no snapshot, CuPy only, ~1 min):
# scripts/h200_fanout_probe.py -- how long after pdl_wait a block has the small vectors it reads, against how many
# blocks read them at once and how many bytes each reads (the folds' loads are in 1.2-1.5 us after the wait, plain
# vectors' 0.47-0.64) -> h200_fanout_probe.json
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 VLMDECODE_GIT_SHA=$(cat .gitsha)
OUT=$OUT timeout 300 python3 scripts/h200_fanout_probe.py 2>&1 | tail -n 30 | cut -c1-300
