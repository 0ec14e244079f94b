#!/bin/bash
# issue 16, prepared in session 14 for the next one: branch fold-probe (snapshot .gpuwt/fp, .gitsha), from the repo
# root with .gpuwt/ holding install.sh (wheels staged). h200_icache_probe_312527d.json: even right after itself, qkv's
# fold spends ~0.86 us between its loads and the end of its scratch barrier. (1) -DVLM_PROBE_PHASES2 splits that
# segment (3 loads in, 4 the thread's parts summed, 5 after the scratch barrier, 7 the extra slots' parts summed,
# 6 vector); -DVLM_FOLD_COMPACT rolls the first warp's loop over the extra parts (qkv 2232 instructions vs 2440,
# 102 registers vs 124; bit-equal: the same adds in the same order); -DVLM_PARAM_WARM reads the folding GEMVs'
# prologue parameters before pdl_wait (constant cache: qkv's imc_miss share was 4.9%, h200_native_stalls_8fc2db4.json);
# (-DVLM_PARAM_WARM_ALL: every GEMV's; o's imc_miss share was 13.8%); unstamped beside an unstamped default build
# -> h200_native_timeline_probe_compact.json. (2) only if the best of compact_plain, param_plain, param_all_plain
# replays >= 0.5% faster than plain: A/B across processes against a snapshot made here (.gpuwt/cp = fp with that
# variant's defines as the first lines of the kernel source) -> ab/{base,cp}N/h200_native_replay.json, and cp's
# native CUDA tests -> h200_fold_cp_tests.txt
# Before: .gpuwt/fp = `git archive fold-probe` (tests/data/exported, data/, notebooks/ left out: the tree must stay
# small), `git rev-parse fold-probe > .gitsha`, install.sh in .gpuwt/ (s14f.sh's setup).
bash .gpuwt/install.sh > /dev/null
ROOT=$PWD; sha=$(cat .gitsha)
mkdir -p .gpuwt/fp/tests/data && cp -r tests/data/exported .gpuwt/fp/tests/data/; cp .gitsha .gpuwt/fp/
export VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$sha PYTHONUNBUFFERED=1
(cd .gpuwt/fp && PYTHONPATH=/tmp/site:$PWD OUT=$OUT timeout 260 python3 scripts/h200_native_timeline.py --variants \
  '{"phases2": ["-DVLM_PROBE_PHASES2"], "phases2_compact": ["-DVLM_PROBE_PHASES2", "-DVLM_FOLD_COMPACT"],
    "phases_compact": ["-DVLM_PROBE_PHASES", "-DVLM_FOLD_COMPACT"], "plain": ["nostamps"],
    "compact_plain": ["nostamps", "-DVLM_FOLD_COMPACT"], "phases2_param": ["-DVLM_PROBE_PHASES2", "-DVLM_PARAM_WARM"],
    "param_plain": ["nostamps", "-DVLM_PARAM_WARM"],
    "param_all_plain": ["nostamps", "-DVLM_PARAM_WARM", "-DVLM_PARAM_WARM_ALL"]}' --tag probe_compact 2>&1 \
  | grep -v "plugin EP" | tail -n 1 | cut -c1-700)
python3 -c "import json; d=json.load(open('$OUT/h200_native_timeline_probe_compact.json')); print({k: v['gemv_fold_probes_us'] for k, v in d['variants'].items()})"
best=$(python3 -c "
import json; d=json.load(open('$OUT/h200_native_timeline_probe_compact.json')); r=d['replay_ms_median']
c={k: r[k] for k in ('compact_plain', 'param_plain', 'param_all_plain')}; k=min(c, key=c.get)
print(' '.join(x[2:] for x in d['variant_defines'][k] if x.startswith('-D')) if c[k] < 0.995 * r['plain'] else '')")
echo "best: '$best'"
[ -n "$best" ] || exit 0
rm -rf .gpuwt/cp && cp -r .gpuwt/fp .gpuwt/cp
python3 - "$best" <<'PY'
import sys
p = ".gpuwt/cp/vlmdecode/native/cuda_src/common.py"
s = open(p).read()
s = s.replace('CODE = r"""\n', 'CODE = r"""\n' + "".join(f"#define {d}  // s15a: the A/B build\n" for d in sys.argv[1].split()), 1)
open(p, "w").write(s)
PY
grep -n "s15a: the A/B build" .gpuwt/cp/vlmdecode/native/cuda_src/common.py
for i in 1 2 3; do
  order="base cp"; [ $i = 2 ] && order="cp base"
  for v in $order; do
    d=$ROOT/.gpuwt/fp; [ $v = cp ] && d=$ROOT/.gpuwt/cp
    mkdir -p $OUT/ab/$v$i
    (cd $d && PYTHONPATH=/tmp/site:$d OUT=$OUT/ab/$v$i timeout 60 \
      python3 $ROOT/scripts/h200_native_replay.py 2>&1 | grep -v "plugin EP" | tail -n 1 | sed "s/^/$v$i /" | cut -c1-200)
  done
done
(cd .gpuwt/cp && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -m cuda tests/test_native_kernels.py \
  tests/test_native_flat8_cuda.py tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" -rf 2>&1 \
  | grep -v "plugin EP" > $OUT/h200_fold_cp_tests.txt; tail -n 5 $OUT/h200_fold_cp_tests.txt)
