#!/bin/bash
# issue 16, prepared in the nineteenth session for the next (main at .gitsha; CuPy only, ~1 min, ~150 s of device
# time with the cold start): scripts/h200_ring_probe.py at its `pd` variants -- mode 3 with the producer's L2 prefetch
# 6 / 12 / 18 tiles ahead (does DRAM keep streaming while the ring is full?), beside everything s19a measured
# -> h200_ring_probe.json (commit it as h200_ring_probe_pd_<sha>.json: h200_ring_probe.json is a8c34f9's run)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 VLMDECODE_GIT_SHA=$(cat .gitsha)
OUT=$OUT timeout 500 python3 scripts/h200_ring_probe.py 2>&1 | tail -n 60 | cut -c1-300
