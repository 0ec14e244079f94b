#!/bin/bash
# issue 16, session 23 (branch mlp-ll at .gitsha; after the 7 staging calls): onnxruntime-gpu + genai into /tmp/site,
# the fused MLP's CUDA tests (mlp_ll against gate_up + down bit for bit; the step with Shapes.mlp_ll against the
# default step), then the step's timeline with the default shapes and with mlp_ll (gemma3-1b, context 1024):
# VARIANTS names them (base, mlp_ll2, mlp_ll3; mlp_llN: Shapes.mlp_ll N).
set -o pipefail
if [ ! -d /tmp/site/onnxruntime ]; then
  cat /root/parts/part* > /tmp/$(cat .gpu/genai/ORT_WHEEL_NAME) && python3 -m pip install -q --no-index --no-deps \
    --target /tmp/site /tmp/onnxruntime_gpu-*.whl .gpu/genai/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
timeout 240 python3 -m pytest -m cuda tests/test_native_mlp_cuda.py -q -p no:cacheprovider -o addopts="" -rf -x 2>&1 \
  | grep -v "plugin EP" | tee "$OUT/h200_mlp_ll_tests_$s7.txt" | tail -n 6
for v in ${VARIANTS:-base mlp_ll2}; do
  sh='{}'; [ $v != base ] && sh="{\"mlp_ll\": ${v#mlp_ll}}"
  OUT="$OUT" timeout 200 python3 scripts/h200_native_timeline.py --shapes "$sh" --tag ${v}_$s7 2>&1 \
    | grep -v "plugin EP" | tail -n 2 | cut -c1-300
  python3 -c "
import json, glob
f = sorted(glob.glob('$OUT/h200_native_timeline_${v}_$s7*.json'))[-1]; d = json.load(open(f))
print('$v', f.split('/')[-1], 'step_us', round(d['step_us'], 1), {k: round(v['span'], 2) for k, v in d['classes_us'].items()},
      'vector', d.get('gemv_vector_formed_us'))" 2>&1 | tail -n 3
done
