#!/bin/bash
# on the device: onnxruntime-gpu + genai + coverage into /tmp/site (once per warm machine)
if [ ! -d /tmp/site/onnxruntime ]; then
  cat /root/parts/part* > /tmp/$(cat .gpu/genai/ORT_WHEEL_NAME) && python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/onnxruntime_gpu-*.whl .gpu/genai/*.whl .whl/*.whl 2>&1 | tail -2
fi
ls /tmp/site | head -3
