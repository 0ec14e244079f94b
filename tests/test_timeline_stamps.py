"""scripts/h200_native_timeline.py's reading of the stamps, no GPU: each block stamps its start (slot 0), its wait
release (1), its end (2) and attention_cl's phases (3-6); an attention cluster that the position does not need exits
at once and stamps only 0 and 2, so the wait statistics and the phases are read over the blocks that waited."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import h200_native_timeline as T  # noqa: E402


def _stamps():
    """Two launches: a GEMV of 2 blocks, then an attention launch of 4 blocks of which the last 2 exited."""
    raw = np.zeros((6, T.SLOTS), np.uint64)
    raw[0, :3] = [1000, 1500, 3000]
    raw[1, :3] = [1100, 1600, 3200]
    for b, (start, wait) in enumerate([(3300, 4000), (3350, 4100)], start=2):  # working attention blocks
        raw[b, [0, 1, 3, 4, 5, 6, 2]] = [start, wait, wait + 1600, wait + 3400, wait + 3700, wait + 4800,
                                         wait + 5400]
    raw[4, [0, 2]] = [3300, 3400]  # exited: start and end only
    raw[5, [0, 2]] = [3320, 3420]
    return raw, [0, 2, 6], ["L1.qkv", "L1.attn"]


def test_wait_statistics_skip_blocks_that_exited_before_their_wait():
    raw, offsets, names = _stamps()
    gemv, attn = T.per_launch(raw, offsets, names)
    assert gemv["waited"] == gemv["blocks"] == 2 and gemv["wait_first"] == 500 and gemv["wait_last"] == 600
    assert attn["blocks"] == 4 and attn["waited"] == 2
    assert attn["wait_first"] == 3000 and attn["wait_median"] == 3050 and attn["wait_last"] == 3100
    assert attn["start_first"] == 2300 and attn["end_last"] == 4100 + 5400 - 1000


def test_attention_phases_read_the_working_blocks_only():
    raw, offsets, names = _stamps()
    phases = T.attention_phases(raw, offsets, names)
    assert list(phases) == ["L1.attn"]
    got = phases["L1.attn"]
    assert got == {"q/k norm, rotary, append": 1.6, "keys (batches + key t)": 1.8,
                   "block partial in shared memory": 0.3, "cluster exchange (wait + barrier)": 1.1,
                   "combine + write": 0.6}
