#!/bin/bash
# issue 16, session 14, branch fold-probe (snapshot .gpuwt/fp, .gitsha). After s14c: qkv's fold has thread 0's loads
# in by 0.54 us after the wait but is ready to reduce only at 1.44 (-DVLM_PROBE_PHASES). Is the next kernels'
# pre-wait work (attention, o, gate|up launched early through PDL) in the way? Phases with attention launched
# without PDL ("nopdl:attn"), with qkv's and the head's pdl_trigger after the vector (-DVLM_TRIGGER_LATE) and every
# GEMV's (-DVLM_TRIGGER_LATE_ALL); those unstamped beside an unstamped default build
# -> h200_native_timeline_probe_trigger.json
bash .gpuwt/install.sh > /dev/null
cd .gpuwt/fp && cp ../../.gitsha . && mkdir -p tests/data && cp -r ../../tests/data/exported tests/data/
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
P='"-DVLM_PROBE_PHASES"'
OUT=$OUT timeout 300 python3 scripts/h200_native_timeline.py --variants '{"phases": ['"$P"'],
  "phases_nopdl_attn": ['"$P"', "nopdl:attn"], "phases_late": ['"$P"', "-DVLM_TRIGGER_LATE"],
  "phases_late_all": ['"$P"', "-DVLM_TRIGGER_LATE_ALL"], "plain": ["nostamps"],
  "late_plain": ["nostamps", "-DVLM_TRIGGER_LATE"], "late_all_plain": ["nostamps", "-DVLM_TRIGGER_LATE_ALL"]}' \
  --tag probe_trigger 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-900
python3 -c "import json; d=json.load(open('$OUT/h200_native_timeline_probe_trigger.json')); print({k: v['gemv_fold_probes_us'] for k, v in d['variants'].items()}); print({k: {c: v['classes_us'][c]['span'] for c in ('qkv', 'attn', 'o', 'gate_up', 'down')} for k, v in d['variants'].items() if 'classes_us' in v})"
