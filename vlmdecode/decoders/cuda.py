"""The CUDA decoder: device-resident KV and three decode modes with identical tokens.

    eager   each step uploads the token's embedding [1,1,H] (+ position, mask slot) and runs the
            decoder uncaptured; logits [V] come back for host sampling   (the inherited baseline)
    graph   the same step captured once as a CUDA graph; each step copies the embedding into the
            bound buffer and replays. Graph ids: see below.
    device  the token never leaves the GPU: two small kernels take the argmax (or a CuPy sampler's
            draw), write the token's embedding straight into the decoder's bound inputs_embeds
            buffer (a gather from the embedding table, or the embedding session on CUDA writing
            into it), sets position_ids and the mask slot; the host reads back 8 bytes per token

CuPy and onnxruntime share one non-blocking stream (`user_compute_stream`), so kernels and
replays are ordered without host syncs: a replay runs with `disable_synchronize_execution_providers`
and device mode syncs only when it reads token ids (decoders.token_ring: by default each token while the next
step runs, `lookahead`; lookahead=False: every `sync_every` tokens; eager and graph modes refuse either
option, they have no such loop). Runs that execute the
graph's nodes (eager mode, a graph id's capturing run) let onnxruntime sync at their end: that
is where it frees their CPU staging; deferred (no sync), onnxruntime 1.31 queues the release with
cudaLaunchHostFunc, which failed on the H200 (CUDA error 201, logged by onnxruntime, eager mode).
Capture rules (fixed addresses, fixed shapes, no host copies inside) are checked in `check_mode` with errors
that state the contract. Not here: the prompt path (prompt_path), device mode's loop and kernels
(cuda_device, cuda_kernels).

The host step (eager, graph): `launch` queues one DMA for the embedding (pinned staging), the run, then the
NEXT position's scalars (position_ids, mask slot), which wait behind the run on the stream, so only the
embedding's copy sits between a pick and the next run. The step's logits output is bound to mapped page-locked
host memory (`buffers.allocate_mapped`): its last kernel writes the row the host samples from, and `collect` is
one stream sync (no copy call; the bytes are counted as before). In graph mode `generate` launches each step
before yielding the token that feeds it (`queue_ahead`, decoders.base), so the GPU computes it while the
pipeline detokenizes and records; eager mode's launch is host-bound (one call per kernel) and synced, so it
keeps the plain loop.
The per-call cost of each part: scripts/h200_host_breakdown.py, data/results/h200_host_overhead_tiny.json.

Windowed KV (GroupQueryAttention sliding_window_cache=1; layout: kvcache.windowed_rows). onnxruntime-gpu 1.31.1
executes the first Run of a new gpu_graph_id three times (two uncaptured runs, then capture + replay). A full-KV
step repeated rewrites one row; a windowed step with a full window shifts the window once per execution, so a
capture on a real step lost two positions (data/results/h200_windowed.json; onnxruntime-genai's graph mode breaks
the same way). A windowed decoder therefore captures each graph id first on a step that repeats harmlessly
(`_capture_windowed`, position 0: nothing evicted); every real step is then one replay.

Graph ids. Every decoder takes its own process-wide gpu_graph_id, so two pipelines never share one.
Default: one id (one capture) for the decoder's life; every generation replays it. That is safe
because every buffer the graph reads or writes is the decoder's own and never moves. With
graph_per_generation=True each generation captures under a fresh id and calls
release_captured_graph at its end; with onnxruntime-gpu 1.31.1 that leaks ~0.29 MiB of device
memory per generation, the same with or without the release call (data/results/h200_graph_memory.json),
so it is not the default.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import modes
from ..buffers import Buffer, allocate_mapped
from ..devices import Device, parse_device
from ..modelfolder import ModelFolder
from ..sampling import Sampler, SamplingParams
from ..sessions import _preload_cuda_libraries, check_cuda, make_session
from .base import PREFILLS, BoundDecoder, DecoderError
from .cuda_device import DeviceLoop
from .cuda_kernels import MAX_SUPPRESS, argmax_blocks, device_kernels  # noqa: F401 -- native imports them here
from .token_ring import check_sync_every

MODES = tuple(m for m in modes.on("cuda", "pipeline") if modes.get(m).factory == "vlmdecode.decoders.cuda:build")
EMBED_VIA = ("gather", "session")
# onnxruntime-gpu 1.31 executes the first Run of a graph id three times inside that one call (twice uncaptured,
# then captured; its log: "Start another run for necessary memory allocation or graph capture", measured in
# data/results/h200_windowed.json); every later Run of the id replays the graph
CAPTURE_RUN = 1
_graph_ids = itertools.count(1)  # process-wide: two decoders never share a gpu_graph_id


def check_mode(mode: str, folder: ModelFolder) -> str:
    """All preconditions of the CUDA modes, in one place, with errors that state the contract."""
    if mode not in MODES:
        raise ValueError(f"unknown CUDA decode mode {mode!r}: allowed {MODES}")
    info = folder.info
    if modes.get(mode).capture and info.kv_layout != "shared":
        raise ValueError(
            f"mode {mode!r} needs a fixed-capacity KV cache bound at fixed addresses (CUDA graph capture); "
            f"this decoder's KV grows by Concat ({folder.decoder.path.name}, attention 'onnx'): use mode='eager' "
            "or build the fixture with --attention gqa"
        )
    if info.kv_layout == "shared" and np.dtype(info.dtype) == np.float32:
        raise ValueError(
            "GroupQueryAttention has no float32 kernel on CUDA (fp16/bf16 only): build the fixture with "
            "--dtype fp16 for CUDA"
        )
    return mode


class CudaDecoder(DeviceLoop, BoundDecoder):
    def __init__(self, folder: ModelFolder, device: Device | str, mode: str = "graph", *,
                 max_length: int | None = None, embed_via: str = "gather", sync_every: int | None = None,
                 profile_prefix: str | None = None, graph_per_generation: bool = False, time_steps: bool = False,
                 provider_options: dict | None = None, prefill: str = "onnxruntime", lookahead: bool | None = None):
        device = parse_device(device)
        if not device.is_cuda:
            raise ValueError(f"CudaDecoder needs a CUDA device, got {device}")
        self.mode = check_mode(mode, folder)
        if embed_via not in EMBED_VIA:
            raise ValueError(f"embed_via must be one of {EMBED_VIA}, got {embed_via!r}")
        ring = " and ".join(k for k, v in (("sync_every", sync_every), ("lookahead", lookahead)) if v is not None)
        if ring and self.mode != "device":
            raise ValueError(f"{ring} set device mode's token loop (decoders.token_ring); mode {self.mode!r} runs no "
                             f"device loop: leave {ring} out or use mode='device'")
        sync_every = 1 if sync_every is None else sync_every
        lookahead = True if lookahead is None else lookahead
        check_sync_every(sync_every)
        if prefill not in PREFILLS:
            raise ValueError(f"prefill must be one of {PREFILLS}, got {prefill!r}")
        import cupy  # after the argument checks, which need no GPU

        self.cp = cupy
        self.embed_via = embed_via
        self.queue_ahead = mode == "graph"  # decoders.base; device mode has its own loop (module docstring)
        # False (default): one gpu_graph_id for the decoder's life, captured once (module docstring)
        self.graph_per_generation = graph_per_generation
        # time_steps: a CUDA event pair around every decoder run (profiling only; off in the timed loop)
        self.step_events: list | None = [] if time_steps else None
        _preload_cuda_libraries()
        check_cuda(device)  # before any CuPy call on that device: a clear error for cuda:7 on a 1-GPU box
        cupy.cuda.Device(device.index).use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream_ptr = int(self.stream.ptr)
        session = make_session(folder.decoder, device, cuda_graph=mode != "eager", stream_ptr=self.stream_ptr,
                               profile_prefix=profile_prefix, provider_options=provider_options)
        with self.stream:
            super().__init__(folder, session, device, None, max_length)
            self._check_device_memory()
            self.graph_id = -1
            self.runs_this_graph = 0
            self.captured = self.replayed = 0
            self.generations = 0
            if mode == "device":
                self._init_device_loop(sync_every, lookahead)  # sets sync_every, lookahead (token_ring)
        self.stream.synchronize()
        self.native = None  # prefill="native": the recognised plan's prefill into this decoder's KV (native.prefill)
        if prefill == "native":
            from ..native.decoder import NativeDecoder

            self.native = NativeDecoder(folder, device, max_length=self.max_length, ort=self)
            self._native_logits = Buffer(self.native.logits, self.device)

    # ---- guards and counters -------------------------------------------------------------------
    def _check_device_memory(self) -> None:
        rt = self.cp.cuda.runtime
        kv = self.kv.keys + self.kv.values if hasattr(self.kv, "keys") else []  # ConcatKV: ORT-owned, checked below
        for ov in getattr(self.kv, "values_ov", []):
            if ov.device_name().lower() != "cuda":
                raise DecoderError(f"KV OrtValue on {ov.device_name()}, not CUDA")
        for b in kv + [self.x_step, self.logits_step, self.mask, self.pos_step]:
            want = rt.memoryTypeHost if b.mapped else rt.memoryTypeDevice  # mapped: host sampling's logits
            attrs = rt.pointerGetAttributes(b.ptr)
            if attrs.type != want:
                raise DecoderError(f"decoder buffer at {b.ptr:#x} has memory type {attrs.type}, not {want} "
                                   "(device memory; mapped host memory for host sampling's logits)")

    def counters(self) -> dict:
        eager = self.steps_run - self.captured - self.replayed
        return {"eager_steps": eager, "captured": self.captured, "replayed": self.replayed,
                "graph_id": self.graph_id, "generations": self.generations}

    # ---- generation lifetime ---------------------------------------------------------------------
    def begin_generation(self) -> None:
        self.generations += 1
        if self.mode != "eager" and (self.graph_per_generation or self.graph_id < 0):
            self.graph_id = next(_graph_ids)
            self.runs_this_graph = 0
            if self.info.windowed:
                self._capture_windowed()
        # runs that execute nodes sync inside onnxruntime (module docstring); replays do not: host sampling
        # waits in `collect`, device mode when it reads token ids
        self.run_options = self._run_options(self.graph_id)
        self._ro_replay = self._run_options(self.graph_id)
        self._ro_replay.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self._scalars_at = -1

    def end_generation(self) -> None:
        if not self.graph_per_generation:
            return  # kept for the next generation; released with the session
        if self.mode != "eager" and self.graph_id > 0 and self.runs_this_graph >= CAPTURE_RUN:
            self.stream.synchronize()
            self.session.release_captured_graph(self.graph_id)

    def run_step(self) -> None:
        """One decoder run over the bound buffers: a replay is queued on the stream (no sync)."""
        if self.mode != "eager" and self.runs_this_graph >= CAPTURE_RUN and self._ro_replay is not None:
            self.run_options = self._ro_replay  # the capture is behind: this run replays
        if self.step_events is None:
            super().run_step()
        else:
            start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
            start.record(self.stream)
            super().run_step()
            end.record(self.stream)
            self.step_events.append((start, end))
        if self.mode != "eager":
            self._count_graph_run()

    def step_device_ms(self) -> list[float]:
        """Device milliseconds of each decoder run since the last call (needs time_steps=True)."""
        if self.step_events is None:
            raise ValueError("step device times need CudaDecoder(time_steps=True)")
        self.stream.synchronize()
        out = [self.cp.cuda.get_elapsed_time(a, b) for a, b in self.step_events]
        self.step_events.clear()
        return out

    def _capture_windowed(self) -> None:
        """Capture the new graph id on a harmless step (module docstring, "Windowed KV"): position 0, input zero,
        mask [1, 0, ...]: seqlens_k 0, so no windowed layer evicts and each of onnxruntime's executions rewrites
        row 0. Then forget it: position 0 and the mask cleared (the prefill writes every row it reads)."""
        with self.stream:
            self.kv.reset()
            self.mask.fill(0)
            self.mask.fill(1, 0, 1)
            self.x_step.fill(0)
            if self.name_pos:
                self.pos_step.fill(0)
            self.session.run_with_iobinding(self.io_step, self._run_options(self.graph_id))
            self.mask.fill(0)
        self.stream.synchronize()
        self.steps_run += 1
        self.runs_this_graph = CAPTURE_RUN  # the capture ran in that Run: later runs replay
        self.captured += 1

    def _count_graph_run(self) -> None:
        """Which of onnxruntime's phases this run of the graph id was: the capture (`CAPTURE_RUN`) or a replay."""
        self.runs_this_graph += 1
        if self.runs_this_graph == CAPTURE_RUN:
            self.captured += 1
        else:
            self.replayed += 1

    # ---- host step (module docstring) -------------------------------------------------------------
    _scalars_at = -1  # the position whose scalars the last launch queued behind its run (-1: none)
    _ro_replay = None  # the run options of a replay (begin_generation)

    def _logits_buffer(self) -> Buffer:
        """Host sampling (eager, graph): the step's logits in mapped host memory; device mode: on the GPU, where
        its kernels read them."""
        if self.mode == "device":
            return super()._logits_buffer()
        return allocate_mapped((1, 1, self.vocab), self.dtype, self.device)

    def launch(self, x: np.ndarray) -> None:
        """Queue the step fed with `x` and return: the input's DMA (+ its scalars unless the previous launch
        queued them), the run, then the next position's scalars behind it."""
        sp, t = self.stream_ptr, self.check_room()
        if self._scalars_at == t:
            self.x_step.write(x, stream=sp)
        else:
            self.feed(x, sp)
        self.run_step()
        self._scalars_at = -1
        if t + 1 < self.max_length:
            self.write_scalars(t + 1, sp)  # staged: their previous DMAs ran before the last collect returned
            self._scalars_at = t + 1

    def collect(self, reuse: bool = False) -> np.ndarray:
        """Wait for the launched step; its logits [V] (reuse: the mapped row itself, overwritten by the next
        launch; else a float32 copy)."""
        if not self.logits_step.mapped:  # device mode: the logits are on the GPU, copied down
            with self.stream:
                return super().collect(reuse)
        self.stream.synchronize()
        self.transfers.add(self.step_bytes)
        return self.logits_host if reuse else self.logits_host.astype(np.float32)

    def step(self, x: np.ndarray, reuse: bool = False) -> np.ndarray:
        with self.stream:  # feed (current stream), run and the logits read queue in order
            return super().step(x, reuse)

    def prefill(self, x, reuse: bool = False) -> np.ndarray:
        with self.stream:  # the logits download too: it must queue behind the prompt's run
            return super().prefill(x, reuse)

    def prefill_on_device(self, x):
        """BoundDecoder's contract; prefill="native": the native prefill writes the KV and the last row's logits."""
        self._scalars_at = -1  # the prompt rewrites the mask
        with self.stream:
            if self.native is None:
                return super().prefill_on_device(x)
            S = self.native._native_prefill(x)
            self.mask.fill(1, 0, S)
            self.mask.fill(0, S)
        return self._native_logits, 0

    def reset(self) -> None:
        self._scalars_at = -1
        with self.stream:
            super().reset()

    # ---- decode loops ----------------------------------------------------------------------------
    def generate(self, x, max_new_tokens: int, sampler: Sampler):
        """Token ids (decoders.base contract). Modes eager/graph: the host loop. Mode device: everything but
        the ids stays on the GPU; the host reads the id ring as decoders.token_ring says (the only syncs)."""
        if self.mode != "device":
            return super().generate(x, max_new_tokens, sampler)
        return self._device_generate(x, max_new_tokens, sampler)


def replay_ms(decoder: CudaDecoder, x: np.ndarray, n: int = 200) -> float:
    """Device time of one decode step with no host work between steps: the decode loop (`generate`, greedy)
    runs prefill, the capture and first replays; then n back-to-back runs of the bound step (replays in
    graph/device mode, uncaptured launches in eager) inside the same generation, timed with CUDA events.
    Re-running the last step is idempotent (it rewrites the same KV row), so n runs measure n steps."""
    cp = decoder.cp
    with decoder.generation():
        for _ in decoder.generate(x, CAPTURE_RUN + 3, Sampler(SamplingParams())):
            pass
        ro = decoder._run_options(decoder.graph_id)
        ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
        start, end = cp.cuda.Event(), cp.cuda.Event()
        with decoder.stream:
            start.record()
            for _ in range(n):
                decoder.session.run_with_iobinding(decoder.io_step, ro)
            end.record()
            end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / n


def build(folder: ModelFolder, device: Device, mode: str, *, max_length: int | None = None, threads: int = 0,
          **options) -> CudaDecoder:
    """modes factory for eager / graph / device; options: CudaDecoder's keywords."""
    return CudaDecoder(folder, device, mode, max_length=max_length, **options)
