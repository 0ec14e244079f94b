#!/bin/bash
# issue 16: gate|up with row groups staged in shared memory before pdl_wait (PF 3-6). From main's root on the device,
# after staging onnxruntime-gpu (bash .gpuwt/install.sh). ~4 min incl. the gemma3-1b fixture. Tar of $OUT returned.
set -o pipefail
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
python3 -m pytest -m cuda tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" -k "gemv" -rf 2>&1 \
  | grep -v "plugin EP" | tee "$OUT/h200_stage_gemv_tests.txt" | tail -n 4
OUT="$OUT" timeout 300 python3 scripts/h200_native_pdl.py --set stage 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-1800
best=$(python3 -c "
import json; d=json.load(open('$OUT/h200_native_stage.json'))['gemma3-1b']['variants']
n=min(d, key=lambda k: d[k]['replay_ms_median']); print(n)")
echo "best: $best"
sh=$(python3 -c "
import sys; sys.path.insert(0, 'scripts'); import h200_native_pdl as p; print(__import__('json').dumps(p.SETS['stage']['$best']))")
OUT="$OUT" timeout 150 python3 scripts/h200_native_timeline.py --shapes "$sh" --tag stage 2>&1 | grep -v "plugin EP" | sed -n '/classes_us/,/^}/p' | tr -d ' \n' | cut -c1-900; echo
