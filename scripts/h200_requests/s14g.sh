#!/bin/bash
# issue 16, session 14, branch fold-probe (snapshot .gpuwt/fp, .gitsha), CuPy only (no wheels staged): does the
# instruction cache keep qkv's fold code between launches? -> h200_icache_probe.json
cd .gpuwt/fp && cp ../../.gitsha .
PYTHONPATH=$PWD VLMDECODE_GIT_SHA=$(cat .gitsha) OUT=$OUT timeout 200 python3 scripts/h200_icache_probe.py 2>&1 | tail -n 12
