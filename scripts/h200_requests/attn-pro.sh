#!/usr/bin/env bash
# issue 16, branch attn-pro (tenth session). Run through `bash .gpuwt/s10b.sh` (req.sh attn-pro) from a snapshot
# of the branch: mkdir -p .gpuwt/attn-pro && git -C /work/wt/attn-pro archive <sha> -- . ':!tests/data/exported' \
#   | tar -x -C .gpuwt/attn-pro; git -C /work/wt/attn-pro rev-parse <sha> > .gpuwt/attn-pro.sha
# As they ran at that session (each one a `--variants` timeline; results in data/results, README there):
#   d69b69b '{"hoist": ["-DVLM_HOIST_QK"]}' --tag hoist
#   be261dc '{"hoist": [...], "probe_entry": ["-DVLM_PROBE_ENTRY", "-DVLM_PROBE_GEMV"], "probe_kv": ["-DVLM_PROBE_KV"],
#            "probe_rope": ["-DVLM_PROBE_ROPE"]}' --tag probes
#   cf382aa CUDA tests (-k "attention or native_pdl or tokens_equal or windowed or loop_variants") with the
#           staged q rows as the branch default, then '{"old_q": ["-DVLM_OLD_Q"]}' --tag stage_q
# PREPARED, NOT RUN (b1b9ded or later; ~4 min incl. the gemma3-1b fixture): one q read before vs right after
# attention_cl's pdl_wait, whole-sector GEMV output stores, the one-pass fold (both norms from one block
# reduction) and the fold's norm weights read before the wait (prew), each beside the branch's old path; the gemv
# probe builds give each one's wait-to-vector times.
export PYTHONUNBUFFERED=1
OUT="$OUT" timeout 420 python3 scripts/h200_native_timeline.py --variants '{"old_q": ["-DVLM_OLD_Q"],
  "prewait_q": ["-DVLM_OLD_Q", "-DVLM_PROBE_PREWAIT_Q"], "postwait_q": ["-DVLM_OLD_Q", "-DVLM_PROBE_POSTWAIT_Q"],
  "sector": ["-DVLM_OLD_Q", "-DVLM_SECTOR_STORES"], "sector_gemv_probe": ["-DVLM_OLD_Q", "-DVLM_SECTOR_STORES",
  "-DVLM_PROBE_GEMV"], "gemv_probe": ["-DVLM_OLD_Q", "-DVLM_PROBE_GEMV"], "fold1": ["-DVLM_OLD_Q",
  "-DVLM_FOLD_ONEPASS"], "fold1_gemv_probe": ["-DVLM_OLD_Q", "-DVLM_FOLD_ONEPASS", "-DVLM_PROBE_GEMV"],
  "prew": ["-DVLM_OLD_Q", "-DVLM_FOLD_PRE_W"], "prew_gemv_probe": ["-DVLM_OLD_Q", "-DVLM_FOLD_PRE_W",
  "-DVLM_PROBE_GEMV"], "prew_fold1": ["-DVLM_OLD_Q", "-DVLM_FOLD_PRE_W", "-DVLM_FOLD_ONEPASS"]}' \
  --tag wait_sector 2>&1 \
  | grep -v "plugin EP" | tail -n 1 | cut -c1-900
