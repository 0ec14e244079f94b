"""vlmdecode.native: the plan types (recognition and the numpy executor tests follow)."""

import numpy as np

from vlmdecode.native import DecoderPlan, LayerPlan, PlanError


def _layer(i, cap):
    z = np.zeros((2, 2), np.float32)
    return LayerPlan(i, "local" if cap else "global", cap, cap, 1e4, z, z, z[0], None, None, z, z, z[0], z[0], z, z,
                     z[0])


def test_plan_sizes_and_capacities():
    p = DecoderPlan("x.onnx", "embeds", np.dtype(np.float16), 64, 4, 2, 16, 128, 320, 1e-6, 0.25, None, None, None,
                    None, (_layer(0, 16), _layer(1, None)), np.zeros(64, np.float32), np.zeros((64, 320)), 7)
    assert (p.q_size, p.kv_size, p.num_layers) == (64, 32, 2)
    assert p.kv_capacities(256) == (16, 256)
    assert issubclass(PlanError, ValueError)
