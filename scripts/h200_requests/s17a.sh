#!/bin/bash
# issue 16, prepared in session 16 for the next (main at .gitsha; no snapshot): can attention_cl's cluster be resident
# while qkv runs? Today it starts 0.66 us after qkv's last block ends and its wait releases 0.93 us after it
# (h200_native_timeline_b29d6b2.json), where o, gate|up and down are resident before their predecessor ends. Registers
# (attn_resident_ptxas.txt; 65536 a SM): qkv (8, 1) is 192 blocks of 8 warps x ~124 (32 K a block) on 132 SMs, so
# some SMs hold two and none is empty; attention_cl in 8 warps x ~228 (57 K) fits beside no qkv block, and its
# cluster needs 16 SMs of one GPC at once. With qkv (8, 2) (96 blocks of 128 registers, fewer than the SMs) and
# attention in 4 warps (attn_threads 128, 228 registers: 29 K) every SM has room for an attention block during qkv.
# Timelines of the three shape sets -> h200_native_timeline_{a128,q82,q82a128}_<sha>.json (the default's: b29d6b2's)
bash .gpuwt/install.sh > /dev/null
export PYTHONPATH=/tmp/site:$PWD VLMDECODE_CACHE=/tmp/vlmcache VLMDECODE_GIT_SHA=$(cat .gitsha) PYTHONUNBUFFERED=1
s7=$(cut -c1-7 .gitsha)
for v in 'a128:{"attn_threads": 128}' 'q82:{"qkv": [8, 2]}' 'q82a128:{"qkv": [8, 2], "attn_threads": 128}'; do
  OUT=$OUT timeout 200 python3 scripts/h200_native_timeline.py --shapes "${v#*:}" --tag ${v%%:*}_$s7 2>&1 \
    | grep -v "plugin EP" | grep -E "^stamped|replay_ms_median|Error" | cut -c1-700
done
