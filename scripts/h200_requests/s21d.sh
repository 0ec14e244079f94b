#!/bin/bash
# issue 16, session 21 (branch gemv-spread at .gitsha, a479f41: main has no SPREAD; after the 7 staging calls): onnxruntime-gpu + genai into /tmp/site, then the
# GEMV tests with SPREAD (rows dealt over the blocks first) and the spread step's bit-equality test
# -> $OUT/h200_gemv_spread_tests.txt. Then s21e.sh back to back (the A/B).
if [ ! -d /tmp/site/onnxruntime ]; then
  cat /root/parts/part* > /tmp/$(cat .gpu/genai/ORT_WHEEL_NAME) && python3 -m pip install -q --no-index --no-deps \
    --target /tmp/site /tmp/onnxruntime_gpu-*.whl .gpu/genai/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/h200_gemv_spread_tests.txt
echo "git $(cat .gitsha)  $(date -u +%FT%TZ)" >> $OUT/h200_gemv_spread_tests.txt
timeout 200 python3 -m pytest -m cuda tests/test_native_cuda.py -v -p no:cacheprovider -o addopts="" \
  -k "gemv or spread" 2>&1 | grep -v "plugin EP" | tee -a $OUT/h200_gemv_spread_tests.txt | tail -n 6 | cut -c1-300
