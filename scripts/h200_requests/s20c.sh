#!/bin/bash
# issue 16, prepared in the nineteenth session for the next (main at .gitsha; CuPy only, < 1 min): scripts/h200_ring_probe.py
# --attn -- mode 4 with the folds and gemma3-1b's decode attention itself inside the persistent kernel (16 blocks'
# split-context partials, 4 blocks' combine, LL; a 1024-row cache, no q/k norm or rotary yet), checked against float64
# first, beside --fold's variants -> h200_ring_probe_attn.json. A short timeout: a poll that never completes spins.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 VLMDECODE_GIT_SHA=$(cat .gitsha)
OUT=$OUT timeout 180 python3 scripts/h200_ring_probe.py --attn 2>&1 | tail -n 40 | cut -c1-300
