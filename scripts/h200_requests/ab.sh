#!/bin/bash
# old main (9218c5e: fold in the consumers, gate_up PF 0) vs new main (ae51022: producer fold, gate_up PF 1): the
# default step through h200_native_pdl.py --set pdl, in alternating processes (old, new, old, new) on one warm GPU
ROOT=$PWD; export VLMDECODE_CACHE=/tmp/vlmcache PYTHONUNBUFFERED=1
cp -r tests/data/exported .gpuwt/old/tests/data/ 2>/dev/null
for i in 1 2; do
  for v in old new; do
    d=$ROOT; sha=$(cat .gitsha); [ $v = old ] && d=$ROOT/.gpuwt/old && sha=9218c5e34b21f924cd0f357acccbbf0d32afc52b
    mkdir -p $OUT/ab/$v$i
    (cd $d && PYTHONPATH=/tmp/site:$d VLMDECODE_GIT_SHA=$sha OUT=$OUT/ab/$v$i timeout 200 python3 scripts/h200_native_pdl.py --set pdl 2>&1 \
      | grep -v "plugin EP" | tail -n 2 | cut -c1-600)
  done
done
cd $OUT/ab && tar czf $OUT/ab.tgz . && ls -R | head
