#!/bin/bash
# issue 16, eighteenth session (main at .gitsha; no snapshot, CuPy only, ~2 min): scripts/h200_code_fetch_probe.py --
# what a kernel pays to fetch its own straight-line code, warm, with its code in L2 only, and from DRAM
# -> h200_code_fetch_probe.json
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 VLMDECODE_GIT_SHA=$(cat .gitsha)
OUT=$OUT timeout 400 python3 scripts/h200_code_fetch_probe.py 2>&1 | tail -n 40 | cut -c1-300
