#!/bin/bash
# issue 16, twenty-eighth session, main after the shuffle landed (.gitsha that commit; after the 9 staging calls,
# < 8 min incl. the gemma3-1b fixture): the bench table at context 1024 (graph, device, native, onnxruntime-genai graph,
# interleaved; the 0.70 ms and 0.35x targets) -> $OUT/b/h200_native_bench_gemma3-1b.{csv,json}, then the context-4096
# part of h200_native.py (native / device / graph per token, the 0.80 ms target)
# -> $OUT/h200_native_proof_ctx4096_<sha>.json. Then s28e.sh.
set -o pipefail
. scripts/h200_requests/preamble.sh
mkdir -p "$OUT/b" "$OUT/ctx"
timeout 300 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 --modes graph device \
  native genai-graph --layouts fused-cuda --new-tokens 48 --repeats 3 --tag h200_native_bench_gemma3-1b --out "$OUT/b" \
  2>&1 | grep -v "plugin EP" | tail -n 6 | cut -c1-400
OUT="$OUT/ctx" timeout 200 python3 scripts/h200_native.py --parts provenance,timing_gemma3_1b_ctx4096 2>&1 \
  | grep -v "plugin EP" | tail -n 4 | cut -c1-600
mv "$OUT/ctx/h200_native.json" "$OUT/h200_native_proof_ctx4096_$s7.json" 2>/dev/null; ls "$OUT" "$OUT/b"
