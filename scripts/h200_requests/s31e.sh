#!/bin/bash
# issue 16, thirty-first session (main at .gitsha; after the 9 staging calls, < 6 min): the cold-reader probe (is
# attention_cl's ~1.4 us to its q rows the latency of a block resident only after qkv's leave?) ->
# $OUT/h200_cold_reader_probe.json (~1 min), then s31d.sh (the Nsight Compute table on main)
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT"
OUT="$OUT" timeout 150 python3 scripts/h200_cold_reader_probe.py 2>&1 | grep -v "plugin EP" | tail -n 8 | cut -c1-300
bash scripts/h200_requests/s31d.sh
