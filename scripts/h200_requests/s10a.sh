#!/bin/bash
# session 10, call A: main's next_attention.sh, then branch attn-o's request
bash .gpuwt/install.sh
echo "== next_attention (main $(cat .gitsha))"; bash .gpuwt/next_attention.sh
echo "== attn-o (a497bb1)"; export VLMDECODE_GIT_SHA=a497bb1; bash .gpuwt/req.sh attn-o
