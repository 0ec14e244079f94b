#!/bin/bash
# issue 16, PREPARED (not run): the second call, right after s11a.sh (~4.5 min on a warm machine), with .gpuwt/
# holding install.sh, req.sh, attn-pro.sh, attn-pro.sha and the snapshot .gpuwt/attn-pro (branch attn-pro, b1b9ded).
# Files: attn-pro/{h200_native_timeline_wait_sector.json, log.txt}.
bash .gpuwt/install.sh
# branch attn-pro: one q read before / after the wait, whole-sector GEMV stores, the one-pass fold, the fold's norm
# weights before the wait
export VLMDECODE_GIT_SHA=$(cat .gpuwt/attn-pro.sha); bash .gpuwt/req.sh attn-pro
