"""Device names: what "cpu", "cuda" and "cuda:N" mean, and how many CUDA devices are visible.

This module is the one place that parses a device string. It is not a session or provider factory and
imports no onnxruntime at import time (`gpu_available` imports it when called); `Device.ort_device` gives
the (device_type, device_id) pair that onnxruntime's IOBinding and OrtValue calls take, and callers pass
it on themselves.

Accepted spellings, exactly and in lowercase (case-sensitive: "CPU", "Cuda:0" are rejected, so that one
device has few spellings and typos fail early):

    "cpu"       the host
    "cuda"      CUDA device 0
    "cuda:N"    CUDA device N, N a non-negative decimal integer: ASCII digits only, no sign, no spaces
                (leading zeros are allowed and dropped: "cuda:01" is cuda:1)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("cpu", "cuda")
ACCEPTED_FORMS = "'cpu', 'cuda' or 'cuda:N' (N a non-negative integer)"

# fullmatch, and [0-9] rather than \d: \d also matches non-ASCII digits such as "٣".
_CUDA_INDEXED = re.compile(r"cuda:([0-9]+)")


@dataclass(frozen=True)
class Device:
    """A device: `kind` is "cpu" or "cuda"; `index` is the CUDA ordinal (always 0 for cpu)."""

    kind: str
    index: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Device.kind must be one of {KINDS}, got {self.kind!r}")
        # bool is an int subclass; Device("cuda", True) is a bug, not device 1.
        if not isinstance(self.index, int) or isinstance(self.index, bool) or self.index < 0:
            raise ValueError(f"Device.index must be an integer >= 0, got {self.index!r}")
        if self.kind == "cpu" and self.index != 0:
            raise ValueError(f"Device.index must be 0 for kind 'cpu', got {self.index!r}")

    def __str__(self) -> str:
        # The canonical spelling; parse_device(str(d)) == d.
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def ort_device(self) -> tuple[str, int]:
        """(device_type, device_id) as onnxruntime's IOBinding.bind_output and OrtValue take them."""
        return (self.kind, self.index)


def parse_device(spec: str | Device) -> Device:
    """Parse "cpu", "cuda" or "cuda:N" into a Device; a Device passes through unchanged.

    Anything else, non-strings included, raises ValueError naming the value and the accepted forms.
    """
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, str):
        if spec == "cpu":
            return Device("cpu")
        if spec == "cuda":
            return Device("cuda", 0)
        match = _CUDA_INDEXED.fullmatch(spec)
        if match:
            return Device("cuda", int(match.group(1)))
    raise ValueError(f"invalid device {spec!r}: expected {ACCEPTED_FORMS}")


def cuda_device_count() -> int:
    """Number of CUDA devices CuPy sees; 0 when CuPy is not installed or CUDA is unusable (no driver, no GPU).

    CuPy is imported here, lazily, so that CPU-only installs never need it.
    """
    try:
        import cupy
    except ImportError:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except (RuntimeError, OSError):
        # cupy.cuda.runtime.CUDARuntimeError (no device, driver too old) is a RuntimeError;
        # OSError covers a CUDA runtime library that cannot be loaded.
        return 0


def gpu_available() -> bool:
    """True when onnxruntime has the CUDA provider and CuPy sees a GPU; never raises."""
    try:
        import onnxruntime

        return "CUDAExecutionProvider" in onnxruntime.get_available_providers() and cuda_device_count() > 0
    except Exception:  # noqa: BLE001
        return False
