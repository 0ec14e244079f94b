#!/usr/bin/env bash
# issue 16, next session: the GEMV-chain probe (CuPy only, no staging, ~1 min). From main's root on the device:
#   run command: export PYTHONPATH=$PWD VLMDECODE_GIT_SHA=$(cat .gitsha) && OUT=$OUT timeout 300 python3 scripts/h200_chain_probe.py
# Reads: is "blocks PF1 persistent" clearly below "blocks PF1 per-op PDL" and below "the step's GEMV launches"?
# If so a persistent step kernel is the path to the 0.70 ms target; if not, the kernel boundaries are not the cost.
export PYTHONPATH=$PWD VLMDECODE_GIT_SHA=$(cat .gitsha) && OUT=$OUT timeout 300 python3 scripts/h200_chain_probe.py
