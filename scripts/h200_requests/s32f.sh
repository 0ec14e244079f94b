#!/bin/bash
# issue 16, thirty-second session (main at .gitsha, attn_stage_q the head_dim-256 default; right after s32e.sh,
# < 7 min): the pipeline bench at contexts 1024 and 4096 in one run (3 interleaved rounds, capacity 4144), native
# beside graph, device and onnxruntime-genai graph: s31b.sh's command (it ran as that script's body, copied)
# -> $OUT/h200_<sha>_native_bench_ctx1024_4096_gemma3-1b.{csv,json}
exec bash scripts/h200_requests/s31b.sh
