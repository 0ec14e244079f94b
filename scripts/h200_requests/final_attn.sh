#!/bin/bash
# issue 16, the session's last GPU run: Shapes.for_head_dim (gemma3-1b: attention 8 warps, batches of 4) as the default.
# 1. the new default beside the class default and batch 2, in one process; 2. every CUDA test; 3. the bench table
# (gemma3-1b, context 1024: graph, device, native, genai graph); 4. context 4096. Files straight under $OUT (no tar).
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
O=$OUT; mkdir -p $O/a $O/b $O/c
OUT=$O/a timeout 150 python3 -c "
import sys, json; sys.path.insert(0,'scripts'); import h200_native_pdl as p, h200_native as hn
from vlmdecode.profiling import prompt_ids
V={'for_head_dim (256 threads, batch 4)': {}, 'class default (128, batch 8)': {'attn_threads': 128, 'attn_batch': 8}, '256 threads, batch 2': {'attn_batch': 2}}
hn.provenance(); pipe = hn.gemma_native(); x = pipe.embed(prompt_ids(hn.CONTEXT), None)
r = p.compare(pipe, x, hn.CONTEXT, hn.CAPACITY, rounds=5, variants=V)
res = {'provenance': hn.results.get('provenance'), 'command': 'h200_native_pdl.compare: the decoder default vs the class default (.gpuwt/final.sh)', 'gemma3-1b': r}
(hn.OUT / 'h200_native_attn_default.json').write_text(json.dumps(res, indent=2, default=str))
print(p.medians(r), r['tokens_equal'])" 2>&1 | grep -v "plugin EP" | tail -n 2 | cut -c1-900
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > /tmp/gpu_info.txt
timeout 260 python3 -m pytest -m cuda tests/ --ignore=tests/test_plots.py -q -p no:cacheprovider -o addopts="" -rf \
  --cov=vlmdecode --cov-config=.ci/coverage-gpu.toml --cov-report=term-missing \
  --junitxml="$O/h200_gpu_tests.xml" 2>&1 | grep -v "plugin EP" | cat /tmp/gpu_info.txt - > "$O/h200_gpu_test_log.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/h200_gpu_test_log.txt" | tail -12
timeout 170 python3 -m vlmdecode.cli bench run --presets gemma3-1b --devices cuda --contexts 1024 --modes graph device native genai-graph \
  --layouts fused-cuda --new-tokens 48 --repeats 3 --tag h200_native_bench_gemma3-1b --out "$O/b" 2>&1 | grep -v "plugin EP" | tail -n 8
OUT=$O/c timeout 150 python3 scripts/h200_native.py --parts provenance,timing_gemma3_1b_ctx4096 2>&1 | grep -v "plugin EP" | tail -n 6
ls -R $O | head -30
