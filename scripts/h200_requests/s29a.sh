#!/bin/bash
# Not run: the twenty-ninth session measured these with s29b.sh and then made the clusters live (s29f.sh, s29g.sh).
# issue 16, prepared in the twenty-eighth session for the next (main at .gitsha; after the 9 staging calls,
# < 5 min; then s29b.sh).
# With one q/k row load a lane (the shuffle, main since 7a3f7ea) the q/k phase that more clusters lengthened (2.03 ->
# 3.00 us at 4 clusters, h200_native_timeline_glob4_ctx4096_fc9e41c.json) should cost less. The step's timeline at context
# 4096, attn_clusters_global 0 (default), 2 and 4 -> $OUT/h200_native_timeline_glob{0,2,4}_ctx4096_<sha>.json.
set -o pipefail
. scripts/h200_requests/preamble.sh
for g in 0 2 4; do
  OUT="$OUT" timeout 100 python3 scripts/h200_native_timeline.py --context 4096 --shapes "{\"attn_clusters_global\": $g}" \
    --tag glob${g}_ctx4096_$s7 2>&1 | grep -v "plugin EP" | tail -n 1 | cut -c1-300
done
