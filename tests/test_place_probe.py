"""scripts/h200_module_place_probe.py's module copies, no GPU: the same kernels of the asked size in every copy, the
copies apart by their first line only (so CuPy compiles and loads each as a module of its own, code unchanged)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import h200_module_place_probe as P  # noqa: E402


def test_copies_differ_by_their_first_line_only():
    a, b = P.module_source(0, 3, 4), P.module_source(1, 3, 4)
    assert a != b and a.splitlines()[1:] == b.splitlines()[1:]
    assert re.findall(r"void (body\d+)\(", a) == ["body0", "body1", "body2"]
    assert a.count("fmaf(") == 3 * 4 * 1024 // 16  # 4 KB of 16-byte FFMAs a kernel


def test_the_evict_first_sweep_is_the_plain_one_with_ldcs():
    assert "void l2_sweep_cs(" in P.SWEEP_CS and "__ldcs(w + i)" in P.SWEEP_CS and "w[i]" not in P.SWEEP_CS
