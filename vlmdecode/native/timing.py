"""The native decoder's timing helpers (a mixin of `native.decoder.NativeDecoder`): the captured step replayed
back to back, with or without advance, and each kernel of an uncaptured step timed alone with CUDA events.

What it is not: the benchmark (`vlmdecode.bench` times the pipeline) or the decoder's step itself.
"""

from __future__ import annotations

import numpy as np

from ..decoders.base import DecoderError
from ..sampling import Sampler


def graph_ms(cp, stream, graph, n: int = 200) -> float:
    """Device ms of one replay of `graph`: one warm replay, then n back to back between two CUDA events."""
    with stream:
        graph.launch(stream)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(n):
            graph.launch(stream)
        end.record()
        end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / n


class StepTiming:
    """Needs the NativeDecoder attributes it reads: cp, stream, kv, max_length, body, bounded, graph(), _start()."""

    def prepare_timing(self, x) -> int:
        """Prefill x and pick the first token (greedy), leaving the decoder mid-sequence for the timing helpers."""
        from ..sampling import SamplingParams

        with self.stream:
            S = self._start(x, Sampler(SamplingParams()))
        self.stream.synchronize()
        return S

    def replay_ms(self, n: int = 200, greedy: bool = False) -> float:
        """Device ms of one captured step, n replays back to back after one warm replay. Without advance
        (default) the replays are idempotent: the same position is recomputed and its KV row rewritten.
        greedy: the step with advance, each replay one token further on the device (n + 1 positions must fit
        in the KV capacity; the host position is not advanced: prepare_timing again before anything else).
        Call after prepare_timing."""
        cp = self.cp
        if greedy and self.kv.position + n + 1 > self.max_length:
            raise DecoderError(f"{n + 1} greedy replays from position {self.kv.position} pass max_length "
                               f"{self.max_length}")
        ms = graph_ms(cp, self.stream, self.graph(greedy), n)
        self.replayed += n + 1
        return ms

    def kernel_ms(self, repeats: int = 20) -> list[dict]:
        """Per-kernel device ms of an uncaptured step (median of `repeats`, CUDA events around each launch),
        with the bytes each must move; then the bounded head's two kernels (if any), which read what the full head
        read. Call after prepare_timing; the step is not advanced."""
        cp = self.cp
        timed = self.body + self.bounded[:2]
        times: list[list[float]] = [[] for _ in timed]
        with self.stream:
            for _ in range(repeats):
                ev = [cp.cuda.Event() for _ in range(len(timed) + 1)]
                ev[0].record()
                for i, launch in enumerate(timed):
                    launch()
                    ev[i + 1].record()
                ev[-1].synchronize()
                for i in range(len(timed)):
                    times[i].append(cp.cuda.get_elapsed_time(ev[i], ev[i + 1]))
                self.uncaptured_steps += 1
        return [{"kernel": b.name, "ms": float(np.median(t)), "bytes": b.nbytes,
                 "tb_per_s": b.nbytes / (np.median(t) * 1e-3) / 1e12}
                for b, t in zip(timed, times)]
