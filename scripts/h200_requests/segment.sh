#!/usr/bin/env bash
# issue 16, branch segment (Shapes.segment: o, gate|up, down, next qkv as one launch). NOT run on a GPU yet.
# Snapshot: mkdir -p .gpuwt/segment && git -C /work/wt/segment archive <sha> -- . ':!tests/data/exported' | tar -x -C .gpuwt/segment
#           and main's (the cross-commit reference): .gpuwt/old from main's head. Then (after staging):
#   bash .gpuwt/install.sh && export VLMDECODE_GIT_SHA=<branch sha> && bash .gpuwt/req.sh segment
# with this file copied to .gpuwt/segment.sh. ~5 min incl. the gemma3-1b fixture. Tar $OUT (<= 8 files return).
set -o pipefail
export PYTHONUNBUFFERED=1
ROOT=$(cd ../.. && pwd)
python3 -m pytest -m cuda tests/test_native_segment_cuda.py -q -p no:cacheprovider -o addopts="" -rA 2>&1 | grep -v "plugin EP" | tee "$OUT/segment_tests.txt" | tail -n 12
timeout 150 python3 -m pytest -m cuda tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" \
  -k "gemv or native_pdl or loop_variants or tokens_equal_onnx" 2>&1 | grep -v "plugin EP" | tee "$OUT/native_tests.txt" | tail -n 3
OUT="$OUT" timeout 250 python3 scripts/h200_native_pdl.py --set segment 2>&1 | grep -v "plugin EP" | tail -n 3 | cut -c1-1500
mkdir -p $OUT/old && (cd $ROOT/.gpuwt/old && PYTHONPATH=/tmp/site:$ROOT/.gpuwt/old OUT=$OUT/old \
  timeout 120 python3 scripts/h200_native_pdl.py --set pdl 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-700)
cd "$OUT" && tar czf segment.tgz --exclude=segment.tgz --exclude=log.txt . && find . -mindepth 1 ! -name segment.tgz ! -name log.txt -delete
