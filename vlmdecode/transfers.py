"""Byte accounting for every copy between host arrays and onnxruntime-bound memory.

Every copy the decoders issue is counted here: `upload` (host -> bound buffer), `download`
(bound buffer -> host) and `note` for copies issued elsewhere (a naive `session.run` that moves its
inputs and outputs) count into the open step (`begin` ... `end`); a decode step whose copies never
change (the bound decoders' host-fed step, device mode's token read) is described once at setup
with `fixed(...)` and recorded per step with `add(record)`: no counting work in the hot loop. On
CPU "device" means memory that onnxruntime reads or writes; on CUDA it is GPU memory. Byte counts
are per step (`steps[i]`: the step that produced token i of the generation), so a test can assert
that a decode step moved exactly `hidden * itemsize + 16` bytes, or 0 KV bytes.

This module does not allocate device memory and never imports CuPy itself: device buffers come in
with a `copy_from_host` / `copy_to_host` pair supplied by the decoder (see vlmdecode.buffers).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np


@dataclass
class StepBytes:
    """Bytes moved during one step, by direction and by what was moved. A `fixed` record is shared by every
    step it describes: read it, never change it."""

    h2d: int = 0
    d2h: int = 0
    by_what: Counter = field(default_factory=Counter)

    @property
    def kv(self) -> int:
        """Bytes of KV cache that crossed between host and device in this step."""
        return sum(n for what, n in self.by_what.items() if what.startswith("kv"))

    def __add__(self, other: StepBytes) -> StepBytes:
        """A new record holding both (e.g. the prompt path's copies and the prefill's, for step 0)."""
        return StepBytes(self.h2d + other.h2d, self.d2h + other.d2h, self.by_what + other.by_what)


class Transfers:
    """Counts bytes per step. `begin()` opens the next step; copies land in the open step."""

    def __init__(self):
        self.steps: list[StepBytes] = []
        self.setup = StepBytes()  # allocations and zero fills before generation
        self._open: StepBytes = self.setup

    def begin(self) -> StepBytes:
        self._open = StepBytes()
        self.steps.append(self._open)
        return self._open

    @staticmethod
    def fixed(moves) -> StepBytes:
        """A record for a step that always moves the same bytes: moves = [(direction, nbytes, what), ...]."""
        rec = StepBytes()
        for direction, nbytes, what in moves:
            if direction not in ("h2d", "d2h"):
                raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
            setattr(rec, direction, getattr(rec, direction) + int(nbytes))
            rec.by_what[f"{what}:{direction}"] += int(nbytes)
        return rec

    def add(self, record: StepBytes) -> None:
        """Record one step described by `fixed` (the same object every time: no per-step work)."""
        self.steps.append(record)

    def end(self) -> StepBytes:
        done, self._open = self._open, self.setup
        return done

    def note(self, direction: str, nbytes: int, what: str) -> None:
        """Record a copy issued elsewhere. direction: 'h2d' or 'd2h'."""
        if direction not in ("h2d", "d2h"):
            raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
        setattr(self._open, direction, getattr(self._open, direction) + int(nbytes))
        self._open.by_what[f"{what}:{direction}"] += int(nbytes)

    def upload(self, buf, host: np.ndarray, what: str, offset: int = 0) -> None:
        """Copy `host` into device buffer `buf` at element `offset` (buf.copy_from_host)."""
        host = np.ascontiguousarray(host, dtype=buf.dtype)
        buf.copy_from_host(host, offset)
        self.note("h2d", host.nbytes, what)

    def download(self, buf, what: str, count: int | None = None, offset: int = 0,
                 out: np.ndarray | None = None) -> np.ndarray:
        """Copy `count` elements (default all) of `buf` from `offset` to a new host array, or into `out`."""
        out = buf.copy_to_host(count, offset, out)
        self.note("d2h", out.nbytes, what)
        return out

    def reset(self) -> None:
        self.steps.clear()
        self.setup = StepBytes()
        self._open = self.setup

    def table(self):
        """Per-step bytes as a pandas DataFrame (step, h2d, d2h, kv, and one column per 'what')."""
        import pandas as pd

        rows = []
        for i, s in enumerate(self.steps):
            row = {"step": i, "h2d_bytes": s.h2d, "d2h_bytes": s.d2h, "kv_bytes": s.kv}
            row.update({f"bytes[{k}]": v for k, v in sorted(s.by_what.items())})
            rows.append(row)
        return pd.DataFrame(rows).fillna(0)
