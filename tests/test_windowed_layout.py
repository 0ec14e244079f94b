"""Windowed KV layout (#11 part 2) on CPU: which row of a windowed layer's buffer holds which position.

onnxruntime's GroupQueryAttention with sliding_window_cache=1 owns the windowed buffer: rows [0, L) hold the
last L positions in order (kvcache.windowed_rows, its WindowedCacheEnd). Checked here against the kernel itself:
the builder's fp32 windowed export decodes on CPU next to its full-KV export (same weights), and every resident
row of layer 0's K buffer (which depends only on the token and its absolute position) equals the full buffer's
row at the position `windowed_rows` names. Capacities W + 16 (the CPU default: a shift every 17 steps) and
W + 1 (cache_slack 1: every other step); prompts longer and shorter than the window. CUDA (C == W):
tests/test_windowed_cuda.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import vlmdecode
from vlmdecode.kvcache import CPU_WINDOW_SLACK, windowed_resident, windowed_rows

EXPORTED = Path(__file__).parent / "data" / "exported"
WINDOWED, FULL = EXPORTED / "builder-text-fp32", EXPORTED / "builder-text-fp32-fullkv"
W = 12  # the builder text model's sliding_window
pytestmark = pytest.mark.skipif(not WINDOWED.is_dir() or not FULL.is_dir(), reason="tests/data/exported absent")


def test_resident_rule():
    assert windowed_rows(5, 12, 12) == [0, 1, 2, 3, 4] + [None] * 7  # not yet full: position p at row p
    assert windowed_rows(45, 12, 12) == list(range(33, 45))  # C == W (CUDA): the last C positions, newest last
    assert [windowed_resident(t, 12, 12) for t in (11, 12, 13, 200)] == [11, 12, 12, 12]
    # C = 28, W = 12: gap 17 -> L stays in [12, 28] once full; it drops by 17 when an append would pass C
    assert [windowed_resident(t, 28, 12) for t in (28, 29, 45, 46)] == [28, 12, 28, 12]
    assert windowed_rows(29, 28, 12)[:12] == list(range(17, 29)) and windowed_rows(29, 28, 12)[12] is None
    with pytest.raises(ValueError, match="1 <= window <= capacity"):
        windowed_resident(30, 8, 12)


def _slack_copy(tmp_path: Path, slack: int) -> Path:
    dst = shutil.copytree(WINDOWED, tmp_path / f"slack{slack}")
    cfg = json.loads((dst / "genai_config.json").read_text())
    cfg["model"]["decoder"]["sliding_window"]["cache_slack"] = slack
    (dst / "genai_config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("slack", [0, 1])  # 0: the CPU default (W + 16)
@pytest.mark.parametrize("prompt_len,new", [(45, 40), (5, 30)])
def test_rows_hold_the_positions_windowed_rows_names(tmp_path, slack, prompt_len, new):
    ids = np.array([json.loads((WINDOWED / "expected.json").read_text())["prompt"]["input_ids"][:prompt_len]])
    win = vlmdecode.load(_slack_copy(tmp_path, slack) if slack else WINDOWED, "cpu", max_length=128)
    full = vlmdecode.load(FULL, "cpu", max_length=128)
    a = win.generate_from_ids(ids, max_new_tokens=new, do_sample=False, stop=()).tokens
    assert a == full.generate_from_ids(ids, max_new_tokens=new, do_sample=False, stop=()).tokens
    cap = win.decoder.kv.capacities[0]
    assert cap == W + (slack or CPU_WINDOW_SLACK)
    total = prompt_len + new - 1  # the last token is not fed back
    assert win.decoder.position == total
    kw, kf = win.decoder.kv.keys[0].array[0, 0], full.decoder.kv.keys[0].array[0, 0]
    rows = windowed_rows(total, cap, W)
    resident = [(r, p) for r, p in enumerate(rows) if p is not None]
    assert len(resident) == min(total, windowed_resident(total, cap, W)) >= min(total, W)
    for r, p in resident:
        np.testing.assert_allclose(kw[r], kf[p], atol=1e-5, err_msg=f"row {r} should hold position {p}")
        assert np.abs(kf[:total] - kw[r]).max(axis=1).argmin() == p  # and no other position


def test_full_kv_copy_is_what_the_builder_writes(tmp_path):
    """windowed_util.full_kv_copy (the CUDA tests' full-KV reference for the fp16 windowed export, which has no
    full-KV twin) turns the fp32 windowed export into the builder's own windowed_kv_cache=false export: same
    inputs/outputs and attention attributes, same tokens."""
    import onnx
    from windowed_util import full_kv_copy

    made = full_kv_copy(WINDOWED, tmp_path / "full")

    def sig(path):
        m = onnx.load(str(path / "model.onnx"), load_external_data=False)
        io = [(v.name, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
              for v in list(m.graph.input) + list(m.graph.output)]
        gqa = [sorted((a.name, onnx.helper.get_attribute_value(a)) for a in n.attribute)
               for n in m.graph.node if n.op_type == "GroupQueryAttention"]
        return io, gqa

    assert sig(made) == sig(FULL) != sig(WINDOWED)
    assert "sliding_window" not in json.loads((made / "genai_config.json").read_text())["model"]["decoder"]
    ids = np.array([json.loads((WINDOWED / "expected.json").read_text())["prompt"]["input_ids"]])
    run = lambda d: vlmdecode.load(d, "cpu").generate_from_ids(ids, max_new_tokens=20, do_sample=False,  # noqa: E731
                                                               stop=()).tokens
    assert run(made) == run(FULL)
