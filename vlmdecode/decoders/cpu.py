"""The CPU decoder: `BoundDecoder` on the CPU execution provider.

KV allocated once (numpy memory bound by address; past and present share it for `gqa`, present
OrtValues fed back for `onnx`), every step's host copies counted by `Transfers`.
"""

from __future__ import annotations

from ..devices import Device
from .base import BoundDecoder


class CpuDecoder(BoundDecoder):
    mode = "cpu"
    static_mask = False  # see BoundDecoder.static_mask: CPU GQA cost follows the mask length

    def __init__(self, folder, session, transfers=None, max_length=None):
        super().__init__(folder, session, Device("cpu"), transfers, max_length)
