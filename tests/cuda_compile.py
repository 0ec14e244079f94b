"""CUDA C++ compiled for sm_90 where no GPU is: nvcc where one is installed, else NVRTC from the nvidia-cuda-nvrtc
wheel (with nvidia-cuda-runtime's headers: both in the `test` extra), and ptxas' report (-Xptxas -v) as the log.
Tests only: the package compiles its kernels through CuPy (`native.kernels.compile_module`) on the GPU it runs on.

What it is not: a check that the kernels run; tests/test_native_cuda.py does that on a GPU.
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import subprocess
from dataclasses import dataclass

import pytest


@dataclass
class Compiled:
    ok: bool
    log: str  # the compiler's messages and ptxas' report
    ptx: str = ""  # ptx=True: the PTX


def _nvidia_dirs() -> list[str]:
    try:
        import nvidia
    except ImportError:
        return []
    return list(nvidia.__path__)


def _nvrtc() -> tuple[str, list[str]] | None:
    """The wheel's libnvrtc and the include folders that hold cuda_fp16.h, or None."""
    libs = [p for d in _nvidia_dirs() for p in sorted(glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so*")))
            if "builtins" not in p]
    incs = sorted({os.path.dirname(p) for d in _nvidia_dirs()
                   for p in glob.glob(os.path.join(d, "*", "include", "cuda_fp16.h"))})
    return (libs[0], incs) if libs and incs else None


def compiler() -> str | None:
    """'nvcc', 'nvrtc' or None (neither: the tests that need one skip)."""
    if shutil.which("nvcc"):
        return "nvcc"
    return "nvrtc" if _nvrtc() else None


needs_compiler = pytest.mark.skipif(compiler() is None, reason="no nvcc and no nvidia-cuda-nvrtc wheel")


def compile_sm90(source: str, tmp_path, *, ptx: bool = False, defines: tuple = ()) -> Compiled:
    """`source` (explicit template instantiations included) for sm_90: a cubin with ptxas' report, or (ptx) PTX."""
    flags = ["-std=c++17"] + [f"-D{d}" for d in defines]
    if compiler() == "nvcc":
        src, out = tmp_path / "k.cu", tmp_path / ("k.ptx" if ptx else "k.cubin")
        src.write_text(source)
        mode = ["--ptx"] if ptx else ["--cubin", "-Xptxas", "-v"]
        r = subprocess.run(["nvcc", *mode, "-arch=sm_90", *flags, "-o", str(out), str(src)], capture_output=True,
                           text=True, timeout=600)
        return Compiled(r.returncode == 0, r.stderr, out.read_text() if ptx and r.returncode == 0 else "")
    lib, incs = _nvrtc()
    nv = ctypes.CDLL(lib)
    prog = ctypes.c_void_p()
    if nv.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    opts = flags + [f"-I{i}" for i in incs] + (["-arch=compute_90"] if ptx else ["-arch=sm_90", "-Xptxas", "-v"])
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    try:
        rc = nv.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nv.nvrtcGetProgramLog(prog, log)
        text = ""
        if ptx and rc == 0:
            nv.nvrtcGetPTXSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            nv.nvrtcGetPTX(prog, buf)
            text = buf.value.decode()
        return Compiled(rc == 0, log.value.decode(errors="replace"), text)
    finally:
        nv.nvrtcDestroyProgram(ctypes.byref(prog))
