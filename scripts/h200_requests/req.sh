#!/bin/bash
# on the device: run helper request $1 in its snapshot; files under $OUT/$1
name=$1; ROOT=$PWD; O=$OUT/$name; mkdir -p $O
cd .gpuwt/$name && mkdir -p tests/data && cp -r $ROOT/tests/data/exported tests/data/
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache OUT=$O
bash $ROOT/.gpuwt/$name.sh > $O/log.txt 2>&1; echo "$name exit $?"; tail -c 6000 $O/log.txt
