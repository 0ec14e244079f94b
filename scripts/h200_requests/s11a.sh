#!/bin/bash
# issue 16, PREPARED (not run): s11.sh's first half, for when one call cannot hold it all (~5 min incl. the gemma3-1b
# fixture build). From main's root with .gpuwt/ holding install.sh; then s11b.sh back to back (warm machine: the
# fixture cache and /tmp/site carry over). Files: h200_native_{slice,gate_up_pf}.json.
bash .gpuwt/install.sh
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
# down's split-K 8 / 6 / 4: fewer parts for the next qkv's fold to read
OUT=$OUT timeout 260 python3 scripts/h200_native_pdl.py --set slice 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-1500
# gate|up's first row group in flight during its fold
OUT=$OUT timeout 200 python3 scripts/h200_native_pdl.py --set gate_up_pf 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-1500
