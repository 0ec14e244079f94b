#!/bin/bash
# issue 16, prepared in session 16, right after s17a.sh (warm): the shape sets of s17a.sh A/B'd against the default
# across processes (scripts/h200_ab.py: 4 variants x 3 rounds, rotated order) -> h200_attn_resident_ab_<sha>.json.
# A set that replays >= 0.3% faster in every round is a candidate for Shapes.for_head_dim (then its CUDA tests and
# the bench, as s15b.sh / s15c.sh).
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
OUT=$OUT timeout 560 python3 scripts/h200_ab.py h200_attn_resident_ab_$(cut -c1-7 .gitsha) \
  '{"base": {}, "a128": {"NATIVE_SHAPES": {"attn_threads": 128}}, "q82": {"NATIVE_SHAPES": {"qkv": [8, 2]}},
    "q82a128": {"NATIVE_SHAPES": {"qkv": [8, 2], "attn_threads": 128}}}' 3 2>&1 | grep -v "plugin EP" | tail -n 14 \
  | cut -c1-400
