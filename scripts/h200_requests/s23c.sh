#!/bin/bash
# issue 16, session 23 (branch down-ring at .gitsha; after the 7 staging calls): onnxruntime-gpu + genai into /tmp/site,
# gemv_ring's CUDA tests (down with three row groups in flight a warp, against gemv's PF 2 bit for bit; the tiny step
# with down at PF 3 / 4 against the default), then the step's timeline with down (4, 1, 3) and (4, 1, 4) (gemma3-1b,
# context 1024). Then s23d.sh back to back.
set -o pipefail
if [ ! -d /tmp/site/onnxruntime ]; then
  cat /root/parts/part* > /tmp/$(cat .gpu/genai/ORT_WHEEL_NAME) && python3 -m pip install -q --no-index --no-deps \
    --target /tmp/site /tmp/onnxruntime_gpu-*.whl .gpu/genai/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
timeout 240 python3 -m pytest -m cuda tests/test_native_ring_cuda.py -q -p no:cacheprovider -o addopts="" -rf -x 2>&1 \
  | grep -v "plugin EP" | tee "$OUT/h200_down_ring_tests_$s7.txt" | tail -n 4
for pf in 3 4; do
  OUT="$OUT" timeout 200 python3 scripts/h200_native_timeline.py --shapes "{\"down\": [4, 1, $pf]}" \
    --tag down_pf${pf}_$s7 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-300
  python3 -c "
import json
d = json.load(open('$OUT/h200_native_timeline_down_pf${pf}_$s7.json'))
print('pf $pf', 'step_us', round(d['step_us'], 1), {k: round(v['span'], 2) for k, v in d['classes_us'].items()},
      [r['blocks'] for r in d['launches'] if r['launch'] == 'L1.down'])" 2>&1 | tail -n 3
done
