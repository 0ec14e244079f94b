#!/bin/bash
# issue 16, session 15: the parameter touch across processes. new = the checkout (.gitsha: the folding GEMVs touch
# form_vector's parameters before pdl_wait), old = main before it (fae51b8, snapshot .gpuwt/old/), all = the checkout
# with every GEMV touching them (snapshot .gpuwt/all/, the touch's condition made `true`). scripts/h200_native_replay.py
# in alternating processes, three rounds in rotated order, on one warm H200; one summary file
# h200_param_warm_ab.json (each process's replay medians and provenance). Only if all replays >= 0.5% faster than
# new: all's native CUDA tests -> h200_param_warm_all_tests.txt
bash .gpuwt/install.sh > /dev/null
ROOT=$PWD; export VLMDECODE_CACHE=/tmp/vlmcache PYTHONUNBUFFERED=1
mkdir -p .gpuwt/old/tests/data .gpuwt/all/tests/data
cp -r tests/data/exported .gpuwt/old/tests/data/; cp -r tests/data/exported .gpuwt/all/tests/data/
grep -c "if (true)  // s15d" .gpuwt/all/vlmdecode/native/cuda_src/gemv.py
for i in 1 2 3; do
  order="old new all"; [ $i = 2 ] && order="new all old"; [ $i = 3 ] && order="all old new"
  for v in $order; do
    d=$ROOT; sha=$(cat .gitsha)
    [ $v = old ] && d=$ROOT/.gpuwt/old && sha=fae51b8
    [ $v = all ] && d=$ROOT/.gpuwt/all && sha=$(cut -c1-7 .gitsha)+all
    mkdir -p /tmp/ab/$v$i
    (cd $d && PYTHONPATH=/tmp/site:$d VLMDECODE_GIT_SHA=$sha OUT=/tmp/ab/$v$i timeout 100 \
      python3 $ROOT/scripts/h200_native_replay.py 2>&1 | grep -v "plugin EP" | tail -n 1 | sed "s/^/$v$i /" | cut -c1-120)
  done
done
python3 - "$OUT/h200_param_warm_ab.json" <<'PY'
import glob, json, os, statistics, sys
runs = {os.path.basename(os.path.dirname(p)): json.load(open(p)) for p in sorted(glob.glob("/tmp/ab/*/h200_native_replay.json"))}
med = {v: statistics.median(r["replay_ms_median"] for k, r in runs.items() if k[:-1] == v) for v in ("old", "new", "all")}
out = {"what": "s15d.sh: the parameter touch, old / new / all across processes", "median_of_process_medians_ms": med,
       "new_vs_old": med["new"] / med["old"], "all_vs_new": med["all"] / med["new"], "runs": runs}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps({k: out[k] for k in ("median_of_process_medians_ms", "new_vs_old", "all_vs_new")}))
PY
[ "$(python3 -c "import json; d=json.load(open('$OUT/h200_param_warm_ab.json')); print(int(d['all_vs_new'] < 0.995))")" = 1 ] || exit 0
(cd .gpuwt/all && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -m cuda tests/test_native_kernels.py \
  tests/test_native_flat8_cuda.py tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" -rf 2>&1 \
  | grep -v "plugin EP" > $OUT/h200_param_warm_all_tests.txt; tail -n 3 $OUT/h200_param_warm_all_tests.txt)
