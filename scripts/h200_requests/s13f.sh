#!/bin/bash
# issue 16, session 13: fold_flat8 A/B across processes. old = main before it (ae18fc1, snapshot .gpuwt/old/), new =
# the checkout (.gitsha); scripts/h200_native_replay.py in alternating processes old, new, old, new, old, new on one
# warm H200, each process its own decoder and kernel module. Files: ab/{old,new}{1,2,3}/h200_native_replay.json
bash .gpuwt/install.sh > /dev/null
ROOT=$PWD; export VLMDECODE_CACHE=/tmp/vlmcache PYTHONUNBUFFERED=1
for i in 1 2 3; do
  for v in old new; do
    d=$ROOT; sha=$(cat .gitsha); [ $v = old ] && d=$ROOT/.gpuwt/old && sha=ae18fc1
    mkdir -p $OUT/ab/$v$i
    (cd $d && PYTHONPATH=/tmp/site:$d VLMDECODE_GIT_SHA=$sha OUT=$OUT/ab/$v$i timeout 100 \
      python3 $ROOT/scripts/h200_native_replay.py 2>&1 | grep -v "plugin EP" | tail -n 1 | sed "s/^/$v$i /" | cut -c1-300)
  done
done
