#!/bin/bash
# issue 16, prepared in the nineteenth session for the next (main at .gitsha; CuPy only, < 1 min): scripts/h200_ring_probe.py
# --fold -- mode 4 (mode 3 with the layer's residual stream and Gemma's four (1 + w) RMSNorms compiled in), checked against float64 first
# (the script stops if the check fails), beside mode 3 without them and the step's GEMV launches, each with and
# without the attention stand-in -> h200_ring_probe_fold.json. A short timeout: a poll that never completes spins.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 VLMDECODE_GIT_SHA=$(cat .gitsha)
OUT=$OUT timeout 180 python3 scripts/h200_ring_probe.py --fold 2>&1 | tail -n 40 | cut -c1-300
