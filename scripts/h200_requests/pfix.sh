#!/usr/bin/env bash
# producer-fold with the TAIL fix (branch head): fold tests, GEMV/step tests, the fold set; then old main's pdl set
set -o pipefail
export PYTHONUNBUFFERED=1
ROOT=$(cd ../.. && pwd)
python3 -m pytest -m cuda tests/test_native_fold_cuda.py -q -p no:cacheprovider -o addopts="" 2>&1 | grep -v "plugin EP" | tee "$OUT/fold_tests.txt" | tail -n 3
timeout 150 python3 -m pytest -m cuda tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" \
  -k "gemv or native_pdl or loop_variants or tokens_equal_onnx" 2>&1 | grep -v "plugin EP" | tee "$OUT/native_tests.txt" | tail -n 3
OUT="$OUT" timeout 250 python3 scripts/h200_native_pdl.py --set fold 2>&1 | grep -v "plugin EP" | tee "$OUT/fold_timing.txt" | tail -n 3 | cut -c1-1500
mkdir -p $OUT/old && (cd $ROOT/.gpuwt/old && PYTHONPATH=/tmp/site:$ROOT/.gpuwt/old VLMDECODE_GIT_SHA=9218c5e34b21f924cd0f357acccbbf0d32afc52b OUT=$OUT/old \
  timeout 120 python3 scripts/h200_native_pdl.py --set pdl 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-700)
cd "$OUT" && tar czf pfix.tgz --exclude=pfix.tgz --exclude=log.txt . && find . -mindepth 1 ! -name pfix.tgz ! -name log.txt -delete
