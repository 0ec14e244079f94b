"""The prompt path: token ids (+ pixel_values) -> the decoder's prefill input, on the decoder's device.

    pixel_values ─upload─► vision (IOBinding) ─► image_features        device array, cached per image
    input_ids    ─upload─► embedding (IOBinding; features bound by address)
                             └─► inputs_embeds written straight into PrefillBuffers.x ─► decoder prefill

On CUDA no feature or embedding byte crosses to the host: the host sends the ids and the pixels
(counted by `Transfers` as "ids" and "pixel_values"), and the vision and embedding sessions run on
the decoder's stream (`user_compute_stream`) without a host sync before the prefill. On CPU the same
bindings save the copy of the embeddings into onnxruntime's input. A decoder without prefill buffers
(the naive mode: everything through the host by design) gets host arrays from plain `session.run`.

`PrefillBuffers`: the prefill's bound buffers, allocated once per decoder and reused by every prompt:
the input [1, max_length, H] (or ids [1, max_length]), the embedding's input ids, position ids
0..max_length-1 (uploaded once) and the logits: the decode step's own [1, 1, V] buffer when the graph
computes the last position only (`pruned_lm_head`: onnxruntime-genai's builder option prune_lm_head,
or the fixture's), else [1, S_max, V] grown to the largest prompt seen and never re-zeroed; only the
last row is read. A fixed-capacity KV cache is bound once; the attention mask is set on the device.

`PhaseTimer`: time to first token by phase (processor, vision, embedding, prefill, first_pick) as
consecutive intervals between marks: CUDA events on the decoder's stream on CUDA (device work is
charged to the phase that queued it), perf_counter on CPU.

Not here: the decode loop (pipeline, decoders), tokenization and image preprocessing (processor).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import dataclass

import numpy as np

from .buffers import Buffer, allocate
from .pipestate import FeatureCache

PHASES = ("processor", "vision", "embedding", "prefill", "first_pick")
LOGITS_ROWS_STEP = 64  # unpruned prefill logits grow in multiples of this many rows


@dataclass(frozen=True)
class Staged:
    """A prompt of `length` positions already written into the decoder's prefill input buffer."""

    length: int


def pruned_lm_head(folder) -> bool:
    """True when the decoder declares logits [B, 1, V]: its LM head runs on the last position only."""
    _, shape = folder.decoder.signature.outputs[folder.decoder.outputs["logits"]]
    return len(shape) == 3 and shape[1] == 1


def _run_options(device):
    from .sessions import ort

    ro = ort().RunOptions()
    ro.add_run_config_entry("gpu_graph_id", "-1")  # see BoundDecoder._run_options: a missing key costs ~30 us
    if device.is_cuda:  # one stream from pixels to logits: the prefill's run is the only sync
        ro.add_run_config_entry("disable_synchronize_execution_providers", "1")
    return ro


def _bind_array(io, name: str, arr, device) -> None:
    """Bind a contiguous numpy (cpu) or CuPy (cuda) array by address."""
    ptr = int(arr.data.ptr) if device.is_cuda else int(arr.ctypes.data)
    io.bind_input(name, device.kind, device.index, np.dtype(arr.dtype), list(arr.shape), ptr)


class PrefillBuffers:
    """The prefill's inputs and outputs of one BoundDecoder, reused across prompts (module docstring)."""

    def __init__(self, decoder):
        d = self.decoder = decoder
        n, dev = d.max_length, d.device
        embeds = d.info.drive == "embeds"
        self.x = allocate((1, n, d.info.hidden_size) if embeds else (1, n), d.dtype if embeds else np.int64, dev)
        self.ids = None
        if embeds and d.folder.embedding is not None:
            e = d.folder.embedding
            ids_dtype = np.dtype(e.signature.inputs[e.inputs["input_ids"]][0])
            self.ids = allocate((1, n), ids_dtype, dev)
        self.pos = None
        if d.name_pos:
            self.pos = allocate((1, n), np.int64, dev)
            d.transfers.upload(self.pos, np.arange(n, dtype=np.int64), "position")  # once, at set-up
        self.pruned = pruned_lm_head(d.folder)
        # pruned: one row; the step's own buffer unless that is mapped host memory (CUDA host sampling): the
        # prompt's row stays on the device, where device-side pickers (native) read it
        self.logits: Buffer | None = d.logits_step if self.pruned and not d.logits_step.mapped else None
        self.io = d.session.io_binding()
        self._keep = None
        self.fixed_kv = d.kv.layout == "shared"
        if self.fixed_kv:  # fixed addresses: bound once, for every prompt (~100 binding calls at 26 layers)
            # logits first, as BoundDecoder.check_kv_outputs reads the outputs (each prompt rebinds it in place)
            d.logits_step.bind_output(self.io, d.name_logits)
            d.kv.bind(self.io, d.past_names, d.present_names)
        self.checked = False  # check_kv_outputs ran on this binding (once is enough: it never changes)

    def logits_for(self, length: int) -> Buffer:
        """The logits buffer of a prompt of `length` positions (grown, never shrunk, when unpruned)."""
        d = self.decoder
        if self.logits is None or (not self.pruned and self.logits.shape[1] < length):
            rows = 1 if self.pruned else min(-(-length // LOGITS_ROWS_STEP) * LOGITS_ROWS_STEP, d.max_length)
            self.logits = None  # free the smaller one before allocating
            self.logits = allocate((1, rows, d.vocab), d.dtype, d.device)
        return self.logits

    def last_row(self, length: int) -> int:
        """Element offset of the last position's logits in `logits_for(length)`."""
        return 0 if self.pruned else (length - 1) * self.decoder.vocab

    def bind(self, x, length: int):
        """Bind a prompt of `length` positions: host array (uploaded into `x`), Staged (already in `x`)
        or an OrtValue; the mask prefix (set on the device), positions, logits and KV. Returns the binding."""
        d, io = self.decoder, self.io
        shape = (1, length) + self.x.shape[2:]
        if isinstance(x, np.ndarray):
            d.transfers.upload(self.x, x, "prompt")
        if isinstance(x, (np.ndarray, Staged)):
            self.x.bind_input(io, d.name_x, shape=shape)
            self._keep = None
        else:
            io.bind_ortvalue_input(d.name_x, x)
            self._keep = x
        d.mask.fill(1, 0, length)
        d.mask.fill(0, length)
        d.mask.bind_input(io, d.name_mask, shape=(1, length))
        if self.pos is not None:
            self.pos.bind_input(io, d.name_pos, shape=(1, length))
        self.logits_for(length).bind_output(io, d.name_logits, shape=(1, 1 if self.pruned else length, d.vocab))
        if not self.fixed_kv:
            d.kv.bind(io, d.past_names, d.present_names)  # a Concat-grown cache: new empty pasts each prompt
        return io


class PromptPath:
    """pixel_values -> image_features -> inputs_embeds in the decoder's prefill buffer (module docstring)."""

    def __init__(self, folder, vision, embedding, decoder):
        self.folder, self.vision, self.embedding = folder, vision, embedding
        self.decoder = decoder
        self.device = decoder.device
        self.buffers: PrefillBuffers | None = getattr(decoder, "prefill_buffers", None)
        self.transfers = decoder.transfers
        self.features = FeatureCache()  # sha256 of pixel_values -> features (numpy on cpu, CuPy on cuda), LRU
        self.vision_runs = 0
        self._pixels: dict[tuple, Buffer] = {}
        self._ro = _run_options(self.device)
        self._vision_io = vision.io_binding() if vision is not None else None
        self._embed_io = embedding.io_binding() if embedding is not None else None
        self._keep = None
        # every copy and kernel of the prompt path queues on the decoder's stream (cpu: no stream)
        stream = getattr(decoder, "stream", None)
        self.on_stream = (lambda: stream) if stream is not None else contextlib.nullcontext
        if embedding is not None:
            e = folder.embedding
            dtype, shape = e.signature.inputs[e.inputs["image_features"]]
            with self.on_stream():
                self._no_features = allocate([0 if isinstance(s, str) else s for s in shape], dtype,
                                             self.device).array

    def image_features(self, pixel_values: np.ndarray):
        """image_features of preprocessed pixels, computed once per distinct image and kept on the device."""
        px = np.ascontiguousarray(pixel_values)
        h = hashlib.sha256(f"{px.shape}{px.dtype}".encode())
        h.update(px)  # the array's buffer, no copy
        key = h.hexdigest()
        feats = self.features.get(key)
        if feats is not None:
            return feats
        if self.buffers is None:
            v = self.folder.vision
            feats = self.vision.run([v.outputs["image_features"]], {v.inputs["pixel_values"]: px})[0]
        else:
            with self.on_stream():
                feats = self._vision(px)
        self.features.put(key, feats)
        self.vision_runs += 1
        return feats

    def _vision(self, px: np.ndarray):
        v = self.folder.vision
        buf = self._pixels.get((px.shape, px.dtype.str))
        if buf is None:
            buf = self._pixels[(px.shape, px.dtype.str)] = allocate(px.shape, px.dtype, self.device)
        self.transfers.upload(buf, px, "pixel_values")
        io = self._vision_io
        buf.bind_input(io, v.inputs["pixel_values"])
        io.bind_output(v.outputs["image_features"], self.device.kind, self.device.index)  # onnxruntime allocates
        self.vision.run_with_iobinding(io, self._ro)
        return _as_array(io.get_outputs()[0], v.signature.outputs[v.outputs["image_features"]][0], self.device)

    def embed(self, input_ids: np.ndarray, features=None):
        """input_ids [1,S] (+ features) -> inputs_embeds [1,S,H] written into the prefill input buffer
        (returns Staged), or on the host for a decoder without prefill buffers (returns the array)."""
        if self.buffers is None:
            e = self.folder.embedding
            feats = self._no_features if features is None else features
            feats = feats if isinstance(feats, np.ndarray) else feats.get()
            return self.embedding.run([e.outputs["inputs_embeds"]],
                                      {e.inputs["input_ids"]: input_ids, e.inputs["image_features"]: feats})[0]
        S = int(input_ids.shape[1])
        if not 0 < S <= self.buffers.ids.shape[1]:
            raise ValueError(f"prompt of {S} tokens: must be between 1 and max_length={self.buffers.ids.shape[1]}")
        with self.on_stream():
            return self._embed(input_ids, features, S)

    def _embed(self, input_ids, features, S: int) -> Staged:
        e, b = self.folder.embedding, self.buffers
        self.transfers.upload(b.ids, input_ids, "ids")
        io = self._embed_io
        b.ids.bind_input(io, e.inputs["input_ids"], shape=(1, S))
        feats = self._no_features if features is None else features
        if self.device.is_cuda:
            import cupy

            feats = cupy.ascontiguousarray(cupy.asarray(feats, dtype=self._no_features.dtype))
        else:
            feats = np.ascontiguousarray(feats, dtype=self._no_features.dtype)
        _bind_array(io, e.inputs["image_features"], feats, self.device)
        b.x.bind_output(io, e.outputs["inputs_embeds"], shape=(1, S, b.x.shape[2]))  # device to device
        self.embedding.run_with_iobinding(io, self._ro)
        self._keep = feats  # bound by address: alive until the next prompt
        return Staged(S)


def _as_array(ortvalue, dtype, device):
    """An OrtValue onnxruntime allocated -> numpy (cpu) or a zero-copy CuPy view that keeps it alive (cuda)."""
    if not device.is_cuda:
        return ortvalue.numpy()
    import cupy

    shape = tuple(ortvalue.shape())
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    mem = cupy.cuda.UnownedMemory(ortvalue.data_ptr(), nbytes, ortvalue, device.index)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(mem, 0))


class PhaseTimer:
    """Time to first token as consecutive phases: `start()`, then `mark(phase)` at the end of each phase.

    On CUDA each mark also records an event on `stream`; `breakdown()` then reports the device
    timeline between marks (work queued without a host sync lands in the phase that queued it).
    Call `breakdown()` only once the first token is on the host (before it is yielded).
    """

    def __init__(self, stream=None):
        self.stream = stream
        self._events: list = []
        self._marks: list[tuple[str, float]] = []

    def start(self, t0: float | None = None) -> None:
        self._marks = [("", time.perf_counter() if t0 is None else t0)]
        self._record(0)

    def mark(self, phase: str) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown TTFT phase {phase!r}: allowed {PHASES}")
        if not self._marks:
            return  # no generation timed (a decoder driven directly)
        self._marks.append((phase, time.perf_counter()))
        self._record(len(self._marks) - 1)

    def _record(self, i: int) -> None:
        if self.stream is None:
            return
        import cupy

        while len(self._events) <= i:
            self._events.append(cupy.cuda.Event())
        self._events[i].record(self.stream)

    def breakdown(self) -> dict[str, float]:
        """Seconds per phase (every phase of PHASES; 0.0 for phases that did not run)."""
        out = dict.fromkeys(PHASES, 0.0)
        if len(self._marks) < 2:
            return out
        if self.stream is None:
            times = [t for _, t in self._marks]
        else:
            import cupy

            last = self._events[len(self._marks) - 1]
            last.synchronize()
            first = self._events[0]
            times = [0.0] + [cupy.cuda.get_elapsed_time(first, self._events[i]) / 1e3
                             for i in range(1, len(self._marks))]
        for i, (phase, _) in enumerate(self._marks[1:], 1):
            out[phase] += times[i] - times[i - 1]
        self._marks = []
        return out
