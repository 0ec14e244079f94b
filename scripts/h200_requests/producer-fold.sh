#!/usr/bin/env bash
# producer-fold (issue 16): Shapes.fold = "producer" -- the residual fold + RMSNorm computed ONCE, by the last block
# of the GEMV before its consumer (o -> gate_up, down -> next qkv; a counter, the block resets it), so those consumers
# are plain-vector GEMVs (gemv<..,0>: the fold's code compiled out, 64-70 registers instead of 75-128) that may load
# their weights before the prologue and the PDL wait (PF 1 / 2) at no occupancy cost. Default OFF. Branch producer-fold;
# NOT landed. Nothing has run on a GPU. Needs onnxruntime-gpu (the gemma3-1b fixture). Estimate ~4-5 min:
#   0. scripts/h200_stream_probe.py --rows (~15 s, CuPy only): gate_up in the gemv's own access pattern, loads only
#      and with its math, and the gemv at PF 0/1/2 with a plain prologue, the fold, and the plain-vector kernel
#      -> $OUT/h200_rows_probe.json
#   1. tests/test_native_fold_cuda.py (~40 s): the tail fold vs float64 numpy (split-K 8 / 3, o's shape), counter reset,
#      relaunch bits; gemv<..,0> == gemv<..> bit for bit; the tiny step producer vs consumer (tokens equal, logits
#      close), PDL vs plain bit-identical.
#   2. scripts/h200_native_pdl.py --set fold (~3.5 min incl. the gemma3-1b fixture): consumer vs producer (default
#      shapes, gate_up PF 1, PF 2, + qkv PF 2, + o in 36 blocks), 5 interleaved rounds -> $OUT/h200_native_fold.json
#   3. tests/test_native_cuda.py -k "gemv or native_pdl or loop_variants or tokens_equal_onnx" (~1 min): the GEMV
#      and step tests over the changed gemv source (new arguments, the tail; the default mode keeps its kernels).
#   4. scripts/h200_native_ncu.py with NATIVE_SHAPES={"fold": "producer", "gate_up": [8, 2, 1]} (~1.5 min): the step's
#      Nsight Compute table in producer mode (kernels serialized: per-kernel times of the plain-vector GEMVs and the
#      tails) -> $OUT/ncu/
# Everything under $OUT is tarred into $OUT/producer-fold.tgz at the end (the device returns at most 8 files).
# Run from a snapshot of branch producer-fold (head a6d94ff). Read $OUT/fold_tests.txt first.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
OUT="$OUT" timeout 90 python3 scripts/h200_stream_probe.py --rows 2>&1 | tee "$OUT/rows_probe.txt" | tail -n 3
python3 -m pytest -m cuda tests/test_native_fold_cuda.py -q -p no:cacheprovider -o addopts="" -rA 2>&1 \
  | grep -v "plugin EP" | tee "$OUT/fold_tests.txt" | tail -n 30
OUT="$OUT" timeout 420 python3 scripts/h200_native_pdl.py --set fold 2>&1 | grep -v "plugin EP" | tee "$OUT/fold_timing.txt" | tail -n 4
timeout 200 python3 -m pytest -m cuda tests/test_native_cuda.py -q -p no:cacheprovider -o addopts="" \
  -k "gemv or native_pdl or loop_variants or tokens_equal_onnx" 2>&1 | grep -v "plugin EP" | tee "$OUT/native_tests.txt" | tail -n 8
NATIVE_SHAPES='{"fold": "producer", "gate_up": [8, 2, 1]}' OUT="$OUT/ncu" timeout 200 python3 scripts/h200_native_ncu.py 2>&1 \
  | grep -v "plugin EP" | tail -n 14
cd "$OUT" && tar czf producer-fold.tgz --exclude=producer-fold.tgz --exclude=log.txt . && find . -mindepth 1 \
  ! -name producer-fold.tgz ! -name log.txt -delete
