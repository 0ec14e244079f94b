#!/bin/bash
# issue 16, session 22 (branch l1pf at .gitsha; after the 7 staging calls): onnxruntime-gpu + genai into /tmp/site,
# then the step's timeline with gate|up's (and the full head's) weights prefetched into L1 (prefetch.global.L1, no
# registers) before pdl_wait and/or a group ahead (-DVLM_L1PF bits, gemv.py), stamped builds side by side with their
# logits against the decoder's graph -> $OUT/h200_native_timeline_l1pf_<sha>.json. Then s22b.sh back to back.
if [ ! -d /tmp/site/onnxruntime ]; then
  cat /root/parts/part* > /tmp/$(cat .gpu/genai/ORT_WHEEL_NAME) && python3 -m pip install -q --no-index --no-deps \
    --target /tmp/site /tmp/onnxruntime_gpu-*.whl .gpu/genai/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
OUT=$OUT timeout 300 python3 scripts/h200_native_timeline.py --variants '{"l1pf1": ["-DVLM_L1PF=1"],
  "l1pf2": ["-DVLM_L1PF=2"], "l1pf3": ["-DVLM_L1PF=3"], "l1pf51": ["-DVLM_L1PF=51"],
  "l1pf3_plain": ["nostamps", "-DVLM_L1PF=3"], "l1pf51_plain": ["nostamps", "-DVLM_L1PF=51"]}' --tag l1pf_$s7 2>&1 \
  | grep -v "plugin EP" | grep -E "^(stamped|l1pf)|replay_ms_median" | python3 -c "
import sys, json
for line in sys.stdin:
    name, _, rest = line.partition(' ')
    try:
        d = json.loads(rest)
    except ValueError:
        print(line[:700]); continue
    print(name, d['step_us'], {k: v['span'] for k, v in d['classes_us'].items()})"
