#!/bin/bash
# issue 16, session 15: attention_cl's parameter touch. new = the checkout (.gitsha), at = the checkout with
# attention_cl touching the parameters it reads after pdl_wait (qkv_in, part, counter, out, scale, softcap, eps, nq)
# before it, as the folding GEMVs do (snapshot .gpuwt/at/). scripts/h200_native_replay.py in alternating processes,
# three rounds (new at / at new / new at) on one warm H200 -> h200_attn_touch_ab.json; only if at replays >= 0.5%
# faster: at's native CUDA tests -> h200_attn_touch_tests.txt
bash .gpuwt/install.sh > /dev/null
ROOT=$PWD; export VLMDECODE_CACHE=/tmp/vlmcache PYTHONUNBUFFERED=1
mkdir -p .gpuwt/at/tests/data && cp -r tests/data/exported .gpuwt/at/tests/data/
grep -c "s15e: the parameters" .gpuwt/at/vlmdecode/native/cuda_src/attn_split.py
for i in 1 2 3; do
  order="new at"; [ $i = 2 ] && order="at new"
  for v in $order; do
    d=$ROOT; sha=$(cat .gitsha); [ $v = at ] && d=$ROOT/.gpuwt/at && sha=$(cut -c1-7 .gitsha)+attn_touch
    mkdir -p /tmp/ab/$v$i
    (cd $d && PYTHONPATH=/tmp/site:$d VLMDECODE_GIT_SHA=$sha OUT=/tmp/ab/$v$i timeout 150 \
      python3 $ROOT/scripts/h200_native_replay.py 2>&1 | grep -v "plugin EP" | tail -n 1 | sed "s/^/$v$i /" | cut -c1-120)
  done
done
python3 - "$OUT/h200_attn_touch_ab.json" <<'PY'
import glob, json, os, statistics, sys
runs = {os.path.basename(os.path.dirname(p)): json.load(open(p)) for p in sorted(glob.glob("/tmp/ab/*/h200_native_replay.json"))}
med = {v: statistics.median(r["replay_ms_median"] for k, r in runs.items() if k[:-1] == v) for v in ("new", "at")}
out = {"what": "s15e.sh: attention_cl's parameter touch, new / at across processes", "median_of_process_medians_ms": med,
       "at_vs_new": med["at"] / med["new"], "runs": runs}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps({k: out[k] for k in ("median_of_process_medians_ms", "at_vs_new")}))
PY
[ "$(python3 -c "import json; d=json.load(open('$OUT/h200_attn_touch_ab.json')); print(int(d['at_vs_new'] < 0.995))")" = 1 ] || exit 0
(cd .gpuwt/at && PYTHONPATH=/tmp/site:$PWD timeout 170 python3 -m pytest -m cuda tests/test_native_kernels.py \
  tests/test_native_flat8_cuda.py tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" -rf 2>&1 \
  | grep -v "plugin EP" > $OUT/h200_attn_touch_tests.txt; tail -n 3 $OUT/h200_attn_touch_tests.txt)
