"""The one gate of the CUDA test modules: skip the whole module unless CuPy sees a GPU and onnxruntime has CUDA.

    cupy, ort = require_cuda()   # at module level, before importing what needs them
"""

import pytest


def require_cuda():
    cupy = pytest.importorskip("cupy")
    try:
        have_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver
        have_gpu = False
    if not have_gpu:
        pytest.skip("no CUDA device", allow_module_level=True)
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDAExecutionProvider", allow_module_level=True)
    return cupy, ort
