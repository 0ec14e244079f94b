#!/bin/bash
# issue 16, session 13, main at .gitsha (fold_flat8 landed): do the folds' ~1.2-1.4 us to their loads (probe run,
# h200_native_timeline_fold_484453d.json) come from norm weights evicted from L2 by the step's weight stream? The
# fold's norm_w / delta_w loads with an L2 evict_last policy (-DVLM_NORM_L2KEEP), unstamped and stamped, beside the
# decoder's own graph; logits vs the decoder graph. File: h200_native_timeline_l2keep.json
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
V='{"keep": ["-DVLM_NORM_L2KEEP"], "keep_plain": ["nostamps", "-DVLM_NORM_L2KEEP"], "plain": ["nostamps"]}'
OUT=$OUT timeout 400 python3 scripts/h200_native_timeline.py --variants "$V" --tag l2keep \
  2>&1 | grep -v "plugin EP" | tail -n 4 | cut -c1-1500
