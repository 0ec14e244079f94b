#!/bin/bash
# issue 16, session 20 (main at .gitsha; CuPy only, < 2 min): head_bound's (rows a warp, PF) shapes alone at
# gemma3-1b's head beside the full fp16 head (scripts/h200_head_bound_sweep.py) -> $OUT/h200_head_bound_sweep.json
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 VLMDECODE_GIT_SHA=$(cat .gitsha)
OUT=$OUT timeout 300 python3 scripts/h200_head_bound_sweep.py --rounds 7 2>&1 | tail -n 12 | cut -c1-300
