"""scripts/h200_native_stalls.py's launch classes, no GPU: five a layer by position, then the step's tail by kernel
name, so that the greedy step's bounded head (head_bound, head_pick) and the full head's GEMV are both classed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import h200_native_stalls as S  # noqa: E402

LAYER = ["void gemv<5, 1, 0, 1>", "void attention_cl<256>", "void gemv<4, 1, 0, 1>", "void gemv<5, 2, 1, 0>",
         "void gemv<4, 1, 0, 2>"]


@pytest.mark.parametrize("tail, classes", [
    (["void head_bound<1, 3, 4, 0, 0, 8>", "void head_pick<5>", "advance"], ["head_bound", "head_pick", "advance"]),
    (["void gemv<5, 2, 2, 0>", "advance"], ["head", "advance"]),
])
def test_layers_by_position_and_the_tail_by_name(tail, classes):
    names = LAYER * 2 + tail
    got = [S.launch_class(i, 10, n) for i, n in enumerate(names)]
    assert got == list(S.CLASSES) * 2 + classes


def test_a_launch_out_of_place_is_refused():
    kernels = [{"name": n, "metrics": {}} for n in LAYER[1:] + LAYER[:1] + ["advance"]]  # a layer rotated by one
    with pytest.raises(RuntimeError, match="kernel 0: ncu saw 'void attention_cl"):
        S.by_class(kernels, [])
