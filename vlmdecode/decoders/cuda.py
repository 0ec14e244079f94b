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
replays are ordered without host syncs; device mode also sets
`disable_synchronize_execution_providers` and syncs only when it reads token ids (every
`sync_every` tokens). Capture rules (fixed addresses, fixed shapes, no host copies inside) are checked
in `check_mode` with errors that state the contract. Not here: the prompt path (prompt_path).

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
from ..buffers import Buffer, allocate, host_array
from ..devices import Device, parse_device
from ..modelfolder import ModelFolder
from ..sampling import NonFiniteLogitsError, Sampler, SamplingParams, sample_unchecked
from ..sessions import _preload_cuda_libraries, check_cuda, make_session
from .base import BoundDecoder, DecoderError

MODES = tuple(m for m in modes.on("cuda", "pipeline") if modes.get(m).factory == "vlmdecode.decoders.cuda:build")
EMBED_VIA = ("gather", "session")
ORT_WARMUP_RUNS = 2  # onnxruntime's CUDA EP runs a graph id this many times uncaptured, then captures
ARGMAX_BLOCKS = 256  # argmax_partial's grid: 256 x 256 threads read a 262144-entry row in 4 strided passes
MAX_SUPPRESS = 64  # suppressed ids the device argmax takes (SamplingParams.suppress)
_graph_ids = itertools.count(1)  # process-wide: two decoders never share a gpu_graph_id

# Greedy pick in two launches. argmax_partial: ARGMAX_BLOCKS blocks each reduce a strided share of the
# logits row to (max, first index of it); advance: one block reduces the partials (or takes a token
# sampled elsewhere) and writes the next step's decoder inputs on the device. One block scanning the
# whole 262144-entry row of gemma3-1b cost 0.04 ms more per token on the H200 (device mode 2.95 -> 2.91
# ms, data/results/h200_runs_{b96166a,5fb6458}_gemma3-1b_unequal_capacity.csv).
_KERNEL = r"""
#include <cuda_fp16.h>
#define TO_F(x) (float)(x)
#define INF_F __int_as_float(0x7f800000)
#define NAN_F __int_as_float(0x7fc00000)

// (a, ia) <- the better of (a, ia), (b, ib): NaN wins (reported), then larger, then the smaller index
__device__ __forceinline__ void better(float& a, long long& ia, float b, long long ib) {
    if (b != b || (a == a && (b > a || (b == a && ib < ia)))) { a = b; ia = ib; }
}

__device__ void block_reduce(float* v, long long* idx, int tid) {
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) { float a = v[tid]; long long ia = idx[tid]; better(a, ia, v[tid + s], idx[tid + s]);
                       v[tid] = a; idx[tid] = ia; }
        __syncthreads();
    }
}

extern "C" __global__ void argmax_partial(const T* logits, const int V, float* part_v, long long* part_i,
                                          const long long* suppress, const int n_suppress)  // ids never picked
{
    __shared__ float v[256];
    __shared__ long long idx[256];
    const int tid = threadIdx.x;
    float bv = -INF_F; long long bi = 0x7fffffffffffffffLL; int bad = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + tid; i < V; i += (long long)gridDim.x * blockDim.x) {
        int skip = 0;
        for (int j = 0; j < n_suppress; ++j) skip |= suppress[j] == i;
        if (skip) continue;
        float x = TO_F(logits[i]);
        if (x != x || x == INF_F) bad = 1;
        if (x > bv || bi == 0x7fffffffffffffffLL) { bv = x; bi = i; }  // strided: the first max of this share
    }
    v[tid] = bad ? NAN_F : bv; idx[tid] = bi;
    block_reduce(v, idx, tid);
    if (tid == 0) { part_v[blockIdx.x] = v[0]; part_i[blockIdx.x] = idx[0]; }
}

extern "C" __global__ void advance(
    const float* part_v, const long long* part_i, const int nparts,  // argmax_partial's output
    const long long* given,                 // [1]: a token sampled elsewhere, or NULL -> reduce the partials
    const T* table, const int H, T* x_out,  // [V,H] embedding rows -> [H] decoder input, or table NULL
    long long* id_out,                      // [1]: the token as an input id (embedding session / id decoder)
    long long* ring, const int slot,        // [k]: token ids the host reads every k steps (-1: no valid token)
    long long* pos, long long* mask, long long* t_dev)
{
    __shared__ float v[1024];
    __shared__ long long idx[1024];
    __shared__ long long tok;
    const int tid = threadIdx.x;
    if (given == NULL) {
        v[tid] = tid < nparts ? part_v[tid] : -INF_F;
        idx[tid] = tid < nparts ? part_i[tid] : 0x7fffffffffffffffLL;
        block_reduce(v, idx, tid);
        // -1: NaN/+inf (reported as NaN) or every logit -inf: nothing to pick (sampling.check_finite's rule)
        if (tid == 0) tok = (v[0] != v[0] || v[0] == -INF_F) ? -1 : idx[0];
    } else if (tid == 0) {
        tok = given[0];
    }
    __syncthreads();
    if (tok < 0) { if (tid == 0) ring[slot] = -1; return; }
    if (table != NULL)
        for (int h = tid; h < H; h += blockDim.x) x_out[h] = table[tok * H + h];
    if (tid == 0) {
        long long t = t_dev[0];
        ring[slot] = tok;
        if (id_out != NULL) id_out[0] = tok;
        pos[0] = t;
        mask[t] = 1;
        t_dev[0] = t + 1;
    }
}
"""


def device_kernels(dtype):
    """(argmax_partial, advance) compiled for logits/embeddings of `dtype` (float16 or float32)."""
    import cupy

    ctype = {np.dtype(np.float16): "__half", np.dtype(np.float32): "float"}[np.dtype(dtype)]
    module = cupy.RawModule(code=_KERNEL.replace("T*", f"{ctype}*"))
    return module.get_function("argmax_partial"), module.get_function("advance")


def argmax_blocks(vocab: int) -> int:
    """argmax_partial's grid for a row of `vocab` logits: blocks of 256 threads, at most ARGMAX_BLOCKS."""
    return int(min(ARGMAX_BLOCKS, -(-vocab // 256)))


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


class CudaDecoder(BoundDecoder):
    def __init__(self, folder: ModelFolder, device: Device | str, mode: str = "graph", *,
                 max_length: int | None = None, embed_via: str = "gather", sync_every: int = 1,
                 profile_prefix: str | None = None, graph_per_generation: bool = False, time_steps: bool = False,
                 provider_options: dict | None = None):
        import cupy

        self.cp = cupy
        device = parse_device(device)
        if not device.is_cuda:
            raise ValueError(f"CudaDecoder needs a CUDA device, got {device}")
        self.mode = check_mode(mode, folder)
        if embed_via not in EMBED_VIA:
            raise ValueError(f"embed_via must be one of {EMBED_VIA}, got {embed_via!r}")
        if sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.embed_via, self.sync_every = embed_via, sync_every
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
                self._init_device_loop()
        self.stream.synchronize()

    # ---- guards and counters -------------------------------------------------------------------
    def _check_device_memory(self) -> None:
        rt = self.cp.cuda.runtime
        kv = self.kv.keys + self.kv.values if hasattr(self.kv, "keys") else []  # ConcatKV: ORT-owned, checked below
        for ov in getattr(self.kv, "values_ov", []):
            if ov.device_name().lower() != "cuda":
                raise DecoderError(f"KV OrtValue on {ov.device_name()}, not CUDA")
        for b in kv + [self.x_step, self.logits_step, self.mask, self.pos_step]:
            attrs = rt.pointerGetAttributes(b.ptr)
            if attrs.type != rt.memoryTypeDevice:
                raise DecoderError(f"decoder buffer at {b.ptr:#x} is not CUDA device memory (type {attrs.type})")

    def counters(self) -> dict:
        eager = self.steps_run - self.captured - self.replayed  # warm-up runs of a graph id count as eager
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
        self.run_options = self._run_options(self.graph_id)
        if self.mode == "device":
            self.run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")

    def end_generation(self) -> None:
        if not self.graph_per_generation:
            return  # kept for the next generation; released with the session
        if self.mode != "eager" and self.graph_id > 0 and self.runs_this_graph > ORT_WARMUP_RUNS:
            self.stream.synchronize()
            self.session.release_captured_graph(self.graph_id)

    def run_step(self) -> None:
        """One decoder run over the bound buffers; the caller holds `with self.stream` (one per step)."""
        if self.step_events is None:
            super().run_step()
        else:
            start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
            start.record()
            super().run_step()
            end.record()
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
        self.runs_this_graph = ORT_WARMUP_RUNS + 1  # warm-ups and capture ran in that Run: later runs replay
        self.captured += 1

    def _count_graph_run(self) -> None:
        """Which of onnxruntime's phases this run of the graph id was: warm-up (eager), capture, or replay."""
        self.runs_this_graph += 1
        if self.runs_this_graph == ORT_WARMUP_RUNS + 1:
            self.captured += 1
        elif self.runs_this_graph > ORT_WARMUP_RUNS + 1:
            self.replayed += 1  # runs 1..ORT_WARMUP_RUNS ran uncaptured: counters() counts them as eager

    def step(self, x: np.ndarray, reuse: bool = False) -> np.ndarray:
        with self.stream:  # one stream context per step: feed, run and the logits read queue in order
            return super().step(x, reuse)

    def prefill(self, x, reuse: bool = False) -> np.ndarray:
        with self.stream:  # the logits download too: it must queue behind the prompt's run
            return super().prefill(x, reuse)

    def prefill_on_device(self, x):
        with self.stream:
            return super().prefill_on_device(x)

    # ---- device loop ------------------------------------------------------------------------------
    def _init_device_loop(self) -> None:
        info = self.info
        self._partial, self._kernel = device_kernels(self.dtype)
        self._nparts = argmax_blocks(self.vocab)
        self._part_v = allocate((self._nparts,), np.float32, self.device)
        self._part_i = allocate((self._nparts,), np.int64, self.device)
        self.ring = allocate((self.sync_every,), np.int64, self.device)
        self.t_dev = allocate((1,), np.int64, self.device)
        self.table = None
        self.embed_session = None
        if info.drive == "embeds":
            if self.embed_via == "gather":
                self.table = self._embedding_table()
            else:
                self._init_embedding_session()
        # where the kernel writes the token: the id decoder's input, a gathered embedding, or the
        # embedding session's input id. Fixed for the decoder's life, so the argument list is built once.
        null = 0
        if info.drive == "ids":
            table, x_out, id_out = null, null, self.x_step.ptr
        elif self.table is not None:
            table, x_out, id_out = self.table.ptr, self.x_step.ptr, null
        else:
            table, x_out, id_out = null, null, self.id_buf.ptr
        # kernel arguments, built once: argmax over the step's logits; advance per ring slot, with the token
        # either reduced from the partials (greedy) or sampled into `given` (sample_unchecked, on the device)
        self.given = allocate((1,), np.int64, self.device)
        self._suppress = allocate((MAX_SUPPRESS,), np.int64, self.device)  # SamplingParams.suppress, per generation
        self._n_suppress = 0
        self._partial_step = self._partial_args(self.logits_step.ptr)

        def advance_args(given: int, slot: int) -> tuple:
            return (np.uint64(self._part_v.ptr), np.uint64(self._part_i.ptr), np.int32(self._nparts),
                    np.uint64(given), np.uint64(table), np.int32(info.hidden_size), np.uint64(x_out),
                    np.uint64(id_out), np.uint64(self.ring.ptr), np.int32(slot), np.uint64(self.pos_step.ptr),
                    np.uint64(self.mask.ptr), np.uint64(self.t_dev.ptr))

        self._advance_args = {g: [advance_args(g, k) for k in range(self.sync_every)] for g in (0, self.given.ptr)}
        self.ring_host = host_array(self.sync_every, np.int64, self.device)
        # device mode's decode step moves no input bytes; each token's id comes back (8 bytes, read k at a time)
        self.step_bytes = self.transfers.fixed([("d2h", 8, "token")])

    def _partial_args(self, logits_ptr: int) -> tuple:
        return (np.uint64(logits_ptr), np.int32(self.vocab), np.uint64(self._part_v.ptr), np.uint64(self._part_i.ptr),
                np.uint64(self._suppress.ptr), np.int32(self._n_suppress))

    def _set_suppress(self, ids: tuple) -> None:
        """The ids the greedy kernel skips for this generation (sampled draws mask them in sample_unchecked)."""
        if len(ids) > MAX_SUPPRESS:
            raise ValueError(f"device mode suppresses at most {MAX_SUPPRESS} token ids, got {len(ids)}")
        if ids:
            self._suppress.array[: len(ids)] = self.cp.asarray(ids, dtype=self.cp.int64)  # on the current stream
        self._n_suppress = len(ids)
        self._partial_step = self._partial_args(self.logits_step.ptr)

    def _embedding_table(self):
        """Every token's embedding [V,H] (embedtable: the embedding model run once per id), uploaded."""
        from ..embedtable import embedding_table

        table = embedding_table(self.folder, self.dtype)
        buf = allocate(table.shape, self.dtype, self.device)
        self.transfers.upload(buf, table, "embedding_table")  # setup, once
        return buf

    def _init_embedding_session(self) -> None:
        e = self.folder.embedding
        self.embed_session = make_session(e, self.device, stream_ptr=self.stream_ptr)  # our stream: ordered
        self.id_buf = allocate((1, 1), np.int64, self.device)
        shape = e.signature.inputs[e.inputs["image_features"]][1]
        self.empty_feats = allocate([0 if isinstance(d, str) else d for d in shape], self.dtype, self.device)
        self.embed_io = self.embed_session.io_binding()
        self.id_buf.bind_input(self.embed_io, e.inputs["input_ids"])
        self.empty_feats.bind_input(self.embed_io, e.inputs["image_features"])
        self.x_step.bind_output(self.embed_io, e.outputs["inputs_embeds"])  # device -> device, no copy
        self.embed_ro = self._run_options(-1)
        self.embed_ro.add_run_config_entry("disable_synchronize_execution_providers", "1")

    def _pick(self, logits: Buffer, offset: int, slot: int, sampler: Sampler, step: int) -> None:
        """Two launches and no sync: choose the token of `logits[offset:offset+V]` (argmax, or a Philox-seeded
        draw by sample_unchecked), then write the next decoder inputs and ring[slot] on the device."""
        if sampler.params.do_sample:
            row = logits.array.reshape(-1)[offset: offset + self.vocab][None]
            self.given.array[...] = sample_unchecked(row, sampler.params, sampler.uniform(step, 1, self.cp))
            self._kernel((1,), (1024,), self._advance_args[self.given.ptr][slot])
        else:
            args = self._partial_step if logits is self.logits_step else self._partial_args(logits.ptr + offset *
                                                                                              self.dtype.itemsize)
            self._partial((self._nparts,), (256,), args)
            self._kernel((1,), (1024,), self._advance_args[0][slot])
        if self.embed_session is not None:
            self.embed_session.run_with_iobinding(self.embed_io, self.embed_ro)

    def generate(self, x, max_new_tokens: int, sampler: Sampler):
        """Token ids (decoders.base contract). Modes eager/graph: the host loop. Mode device: everything but
        the ids stays on the GPU; the host reads the ring every `sync_every` tokens (the only sync)."""
        if self.mode != "device":
            return super().generate(x, max_new_tokens, sampler)
        return self._device_generate(x, max_new_tokens, sampler)

    def _device_generate(self, x, max_new_tokens: int, sampler: Sampler):
        k, tr = self.sync_every, self.transfers
        with self.generation():
            tr.steps.clear()
            with self.stream:
                self._set_suppress(sampler.params.suppress)
                tr.begin()
                logits, last = self.prefill_on_device(x)
                self.mark("prefill")
                self.t_dev.write_scalar(self.kv.position)  # staged: the previous generation's copy ran
                tr.note("h2d", 8, "position")
                tr.note("d2h", 8, "token")
                tr.end()
                self._pick(logits, last, 0, sampler, 0)
            pending, done = 1, 0
            while True:
                if pending == k or done + pending == max_new_tokens:
                    with self.stream:
                        ids = self.ring.copy_to_host(pending, 0, self.ring_host[:pending]).tolist()  # the sync
                    for i, tok in enumerate(ids):
                        if tok < 0:
                            raise NonFiniteLogitsError(
                                f"non-finite logits at step {done + i}: NaN or +inf, or every logit -inf", done + i,
                                (0,))
                        yield tok
                    done, pending = done + pending, 0
                    if done == max_new_tokens:
                        return
                with self.stream:
                    self.run_step()  # replay (no host feed: the kernel wrote the inputs)
                    self._pick(self.logits_step, 0, pending, sampler, done + pending)
                tr.add(self.step_bytes)
                pending += 1


def replay_ms(decoder: CudaDecoder, x: np.ndarray, n: int = 200) -> float:
    """Device time of one decode step with no host work between steps: the decode loop (`generate`, greedy)
    runs prefill + warm-up, capture and a first replay; then n back-to-back runs of the bound step (replays in
    graph/device mode, uncaptured launches in eager) inside the same generation, timed with CUDA events.
    Re-running the last step is idempotent (it rewrites the same KV row), so n runs measure n steps."""
    cp = decoder.cp
    with decoder.generation():
        for _ in decoder.generate(x, ORT_WARMUP_RUNS + 3, Sampler(SamplingParams())):
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
