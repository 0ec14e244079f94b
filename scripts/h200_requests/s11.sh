#!/bin/bash
# issue 16, PREPARED for the eleventh session (not run; the device lent no machine that session): s11a.sh then
# s11b.sh in one call after staging (~8-9 min incl. the gemma3-1b fixture, near the 10-min call limit: run the two
# halves as two back-to-back calls instead when the budget allows). From main's root with .gpuwt/ holding
# install.sh, req.sh, s11a.sh, s11b.sh, attn-pro.sh, attn-pro.sha and the snapshot .gpuwt/attn-pro (branch attn-pro
# at d41286a; see attn-pro.sh). <= 8 files come back.
bash .gpuwt/s11a.sh
bash .gpuwt/s11b.sh
