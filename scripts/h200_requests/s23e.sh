#!/bin/bash
# issue 16, session 23 (branch fold-split at .gitsha; after the 7 staging calls): onnxruntime-gpu + genai into
# /tmp/site, gemv_split's CUDA tests (gate|up with half the warps' first rows in flight while the other half forms
# the vector), the step's timeline with gate|up (8, 2, 3), then the replayed step across processes, base against it
# (h200_ab.py, 3 rounds) -> $OUT/h200_gate_up_split_ab_<sha>.json (gemma3-1b, context 1024).
set -o pipefail
if [ ! -d /tmp/site/onnxruntime ]; then
  cat /root/parts/part* > /tmp/$(cat .gpu/genai/ORT_WHEEL_NAME) && python3 -m pip install -q --no-index --no-deps \
    --target /tmp/site /tmp/onnxruntime_gpu-*.whl .gpu/genai/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
timeout 200 python3 -m pytest -m cuda tests/test_native_split_cuda.py -q -p no:cacheprovider -o addopts="" -rf -x 2>&1 \
  | grep -v "plugin EP" | tee "$OUT/h200_gate_up_split_tests_$s7.txt" | tail -n 4 || exit 1
OUT="$OUT" timeout 200 python3 scripts/h200_native_timeline.py --shapes '{"gate_up": [8, 2, 3]}' \
  --tag gate_up_split_$s7 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-300
python3 -c "
import json
d = json.load(open('$OUT/h200_native_timeline_gate_up_split_$s7.json'))
print('split step_us', round(d['step_us'], 1), {k: (round(v['release'], 2), round(v['body'], 2), round(v['span'], 2))
      for k, v in d['classes_us'].items()})"
OUT="$OUT" timeout 330 python3 scripts/h200_ab.py h200_gate_up_split_ab_$s7 \
  '{"base": {}, "split": {"NATIVE_SHAPES": {"gate_up": [8, 2, 3]}}}' ${ROUNDS:-3} 2>&1 | grep -v "plugin EP" | tail -n 7
