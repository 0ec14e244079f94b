"""The CPU decoder: `BoundDecoder` on the CPU execution provider.

KV allocated once (numpy memory bound by address; past and present share it for `gqa`, present
OrtValues fed back for `onnx`), every step's host copies counted by `Transfers`.
"""

from __future__ import annotations

from ..devices import Device
from .base import BoundDecoder


class CpuDecoder(BoundDecoder):
    mode = "resident"
    static_mask = False  # see BoundDecoder.static_mask: CPU GQA cost follows the mask length

    def __init__(self, folder, session, transfers=None, max_length=None):
        super().__init__(folder, session, Device("cpu"), transfers, max_length)


def build(folder, device: Device, mode: str, *, max_length: int | None = None, threads: int = 0,
          **options) -> CpuDecoder:
    """modes factory for "resident"."""
    from ..sessions import make_session

    if options:
        raise ValueError(f"options {sorted(options)} are for CUDA decoders; device is cpu")
    folder.require_cpu_support()
    return CpuDecoder(folder, make_session(folder.decoder, device, threads=threads), max_length=max_length)
