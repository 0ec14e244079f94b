#!/bin/bash
# issue 16, nineteenth session (main at .gitsha; CuPy only, ~1-2 min): scripts/h200_ring_probe.py -- a persistent
# kernel whose cp.async.bulk producer runs ahead of the GEMV chain's dependencies, against the step's GEMV launches
# -> h200_ring_probe.json
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 VLMDECODE_GIT_SHA=$(cat .gitsha)
OUT=$OUT timeout 500 python3 scripts/h200_ring_probe.py 2>&1 | tail -n 40 | cut -c1-300
