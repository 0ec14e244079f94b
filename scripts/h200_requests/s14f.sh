#!/bin/bash
# issue 16, session 14, branch fold-probe (snapshot .gpuwt/fp, .gitsha). After s14c/s14e: qkv's fold is ready to
# reduce 0.9 us after its loads are in, and each later phase takes time in step with its code's length, not its work:
# is it the instruction cache? -DVLM_FOLD_WARM runs the fold's code (one out-of-line copy) once before pdl_wait on
# the weights' bytes. (1) phases and unstamped replays, default vs warm -> h200_native_timeline_probe_warm.json;
# (2) only if warm_plain replays >= 1% faster: A/B across processes (snapshot .gpuwt/wu = fp with VLM_FOLD_WARM
# defined at the top of the kernel source) -> ab/{base,wu}N/h200_native_replay.json, and wu's native CUDA tests
# -> h200_fold_warm_tests.txt
bash .gpuwt/install.sh > /dev/null
ROOT=$PWD; sha=$(cat .gitsha)
for d in fp wu; do mkdir -p .gpuwt/$d/tests/data && cp -r tests/data/exported .gpuwt/$d/tests/data/; cp .gitsha .gpuwt/$d/; done
export VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$sha PYTHONUNBUFFERED=1
(cd .gpuwt/fp && PYTHONPATH=/tmp/site:$PWD OUT=$OUT timeout 260 python3 scripts/h200_native_timeline.py --variants \
  '{"phases": ["-DVLM_PROBE_PHASES"], "warm_phases": ["-DVLM_PROBE_PHASES", "-DVLM_FOLD_WARM"],
    "plain": ["nostamps"], "warm_plain": ["nostamps", "-DVLM_FOLD_WARM"]}' --tag probe_warm 2>&1 \
  | grep -v "plugin EP" | tail -n 1 | cut -c1-700)
python3 -c "import json; d=json.load(open('$OUT/h200_native_timeline_probe_warm.json')); print({k: v['gemv_fold_probes_us'] for k, v in d['variants'].items()}); print({k: {c: v['classes_us'][c]['span'] for c in ('qkv', 'attn', 'o', 'gate_up', 'down')} for k, v in d['variants'].items() if 'classes_us' in v})"
go=$(python3 -c "import json; r=json.load(open('$OUT/h200_native_timeline_probe_warm.json'))['replay_ms_median']; print(int(r['warm_plain'] < 0.99 * r['plain']))")
echo "go=$go"
[ "$go" = 1 ] || exit 0
for i in 1 2 3; do
  order="base wu"; [ $i = 2 ] && order="wu base"
  for v in $order; do
    d=$ROOT/.gpuwt/fp; [ $v = wu ] && d=$ROOT/.gpuwt/wu
    mkdir -p $OUT/ab/$v$i
    (cd $d && PYTHONPATH=/tmp/site:$d OUT=$OUT/ab/$v$i timeout 60 \
      python3 $ROOT/scripts/h200_native_replay.py 2>&1 | grep -v "plugin EP" | tail -n 1 | sed "s/^/$v$i /" | cut -c1-200)
  done
done
(cd .gpuwt/wu && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -m cuda tests/test_native_kernels.py \
  tests/test_native_flat8_cuda.py tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" -rf 2>&1 \
  | grep -v "plugin EP" > $OUT/h200_fold_warm_tests.txt; tail -n 5 $OUT/h200_fold_warm_tests.txt)
