#!/bin/bash
# issue 16, session 14, branch fold-probe (snapshot .gpuwt/fp, its sha in .gitsha), from the repo root with .gpuwt/
# holding install.sh. (1) s13g's set: which of fold_flat8's loads come in last (-DVLM_PROBE_ORDER_A / _B, slots 3-5
# with 10th / 50th / 90th percentiles over blocks) -> h200_native_timeline_probe_order.json; (2) the fold-load
# contention microbenchmark (same lines for every block vs a copy each; written / clean L2 / cold)
# -> h200_fold_contention.json
bash .gpuwt/install.sh > /dev/null
cd .gpuwt/fp && cp ../../.gitsha . && mkdir -p tests/data && cp -r ../../tests/data/exported tests/data/
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 100 python3 scripts/h200_fold_contention.py 2>&1 | tail -n 80
OUT=$OUT timeout 240 python3 scripts/h200_native_timeline.py --variants '{"order_a": ["-DVLM_PROBE_ORDER_A"],
  "order_b": ["-DVLM_PROBE_ORDER_B"]}' --tag probe_order 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-600
python3 -c "import json; d=json.load(open('$OUT/h200_native_timeline_probe_order.json')); print({k: v['gemv_fold_probes_us'] for k, v in d['variants'].items()})"
