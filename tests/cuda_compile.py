"""CUDA C++ compiled for sm_90 by nvcc, where one is installed (no GPU needed), with ptxas' report (-Xptxas -v) as
the log: the compile and register tests' one way to build the native kernels' source (tests/test_native_kernels.py).
Tests only: the package compiles its kernels through CuPy (`native.kernels.compile_module`) on the GPU it runs on.

What it is not: a check that the kernels run; tests/test_native_cuda.py does that on a GPU.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

import pytest

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")


@dataclass
class Compiled:
    ok: bool
    log: str  # nvcc's messages and ptxas' report
    ptx: str = ""  # ptx=True: the PTX


def compile_sm90(source: str, tmp_path, *, ptx: bool = False, defines: tuple = ()) -> Compiled:
    """`source` (explicit template instantiations included) for sm_90: a cubin with ptxas' report, or (ptx) PTX."""
    src, out = tmp_path / "k.cu", tmp_path / ("k.ptx" if ptx else "k.cubin")
    src.write_text(source)
    mode = ["--ptx"] if ptx else ["--cubin", "-Xptxas", "-v"]
    r = subprocess.run(["nvcc", *mode, "-arch=sm_90", "-std=c++17", *[f"-D{d}" for d in defines], "-o", str(out),
                        str(src)], capture_output=True, text=True, timeout=600)
    return Compiled(r.returncode == 0, r.stderr, out.read_text() if ptx and r.returncode == 0 else "")
