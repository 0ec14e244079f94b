"""The decoder contract, the one decode loop, and the IO-bound decoder the CPU and CUDA decoders share.

The contract: what `Pipeline` (and bench, profiling, margins, replay) rely on. A new decoder (e.g.
`vlmdecode.native`) subclasses `Decoder`, provides the abstract part, gets the rest, and is registered
with a factory in `vlmdecode.modes`.

    provide  mode: str                    its `vlmdecode.modes` name
             device, max_length, vocab, dtype, info (folder.info), transfers (`Transfers`)
             kv                           the cache; owns `position` (read-only), advance(n), reset()
             prefill(x, reuse=False)      x [1,S,H] | ids [1,S] (host) -> last position's logits [V] (host);
                                          resets the KV first; counts one `transfers` step
             step(x, reuse=False)         one input [1,1,H] | [[id]] -> logits [V]; counts one step
                                          (bound decoders: launch(x), then collect(reuse))
             stream_ptr: int | None       the CUDA stream the pipeline's other sessions must run on
             prefill(prompt_path.Staged)  (bound decoders) the prompt the embedding model already wrote into
                                          `prefill_buffers.x` on the device
    may override
             generate(x, n, sampler)      the loop below; a decoder that samples on the device replaces it
             begin_generation() / end_generation()   per-generation state (CUDA graph ids)
             counters() -> dict           e.g. eager/captured/replayed steps
             timer                        a prompt_path.PhaseTimer the pipeline sets; `mark("prefill")` when the
                                          prompt's run is done (before its logits are read), if it can
    gets     generation()                 context manager: begin ... end, also when abandoned
             generate(x, n, sampler)      generator of n token ids: prefill, then pick + step per token
             token_input(token, step)     the host input that feeds `token` back (embedding row or id)
             position                     kv.position

`generate` yields plain ints and does no host work between yields: the pipeline times each `next()`
(decoder work + sampling, never the consumer's time), and adds text, stop ids and records around it. A
decoder with `queue_ahead` (CUDA host sampling) has the next step running on the device while the token is
out: its `next()` waits for that step, picks, and launches the following one; when the consumer stops early,
that last launched step is discarded (the KV position is one past the last token fed back).
`transfers.steps[i]` holds the bytes of the step that produced token i (prefill for i = 0).
`reuse=True` returns logits in the model's dtype in one host array the decoder owns (page-locked on
CUDA), overwritten by the next prefill/step; the default returns a new float32 array.

`BoundDecoder` (CPU and CUDA): every input and output of a decode step is bound ONCE to a fixed buffer
(`vlmdecode.buffers`): the one-token input, position_ids [1,1], a static attention mask [1,max_length]
whose next slot is set to 1 each step, logits [1,1,V] and the KV cache (`kvcache.FixedKV`, past and
present sharing one buffer). A step copies only the new input and two int64 scalars in (one staged
copy each, `Buffer.write`) and the logits out; its byte record is fixed at setup. With the
Concat-growing `onnx` decoder (`kvcache.ConcatKV`) the mask is bound as a growing prefix view of the
same buffer and the KV OrtValues are rebound each step.

Not here: sampling rules (sampling), tokenization, device-side loops (decoders.cuda), mode names (modes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from ..buffers import Buffer, allocate, host_array
from ..devices import Device
from ..kvcache import ConcatKV, FixedKV, layer_capacities
from ..modelfolder import ModelFolder
from ..prompt_path import PrefillBuffers, Staged
from ..transfers import Transfers


class DecoderError(RuntimeError):
    pass


PREFILLS = ("onnxruntime", "native")  # who runs a CUDA decoder's prompt: the ONNX decoder, or native.prefill


def prompt_length(x, max_length: int, context_length: int | None) -> int:
    """S of a prompt -- `Staged`, an array [1, S, ...] or an OrtValue -- checked: 1 <= S < max_length (the KV
    capacity leaves room for one generated token at least)."""
    if isinstance(x, Staged):
        S = x.length
    else:
        S = int(x.shape()[1] if callable(getattr(x, "shape", None)) else x.shape[1])
    if S <= 0 or S >= max_length:
        raise DecoderError(f"prompt of {S} tokens: must be between 1 and max_length-1={max_length - 1}; pass a larger "
                           f"max_length= to load() (at most the model's context_length {context_length})")
    return S


def check_max_length(folder: ModelFolder, max_length: int | None) -> int:
    """The KV capacity to allocate: ModelFolder.capacity's rule (max_length= checked against the context
    length, else min(the folder's max_length, modelfolder.DEFAULT_CAPACITY))."""
    return folder.capacity(max_length)


class Decoder:
    """The shared part of the contract (module docstring): generation(), the loop, token inputs."""

    mode = "?"
    stream_ptr: int | None = None
    timer = None  # prompt_path.PhaseTimer, set by the pipeline: TTFT by phase

    def mark(self, phase: str) -> None:
        """End of a TTFT phase (prompt_path.PHASES), when a timer is set."""
        if self.timer is not None:
            self.timer.mark(phase)

    def __init__(self, folder: ModelFolder, device: Device, transfers: Transfers | None, max_length: int | None):
        self.folder, self.device, self.info = folder, device, folder.info
        self.transfers = transfers if transfers is not None else Transfers()
        self.max_length = check_max_length(folder, max_length)
        self.dtype = np.dtype(self.info.dtype)
        self.vocab = folder.vocab_size
        self._table = None  # embedtable rows, built on the first decode step that needs one

    @property
    def position(self) -> int:
        return self.kv.position

    def counters(self) -> dict:
        return {}

    def begin_generation(self) -> None:
        """Hook for decoders that hold per-generation state (CUDA graph ids)."""

    def end_generation(self) -> None:
        """Hook, called when a generation ends (also when it is abandoned)."""

    _depth = 0  # open generation() contexts: only the outermost begins and ends

    @contextlib.contextmanager
    def generation(self):
        """One generation: begin_generation() now, end_generation() at exit, whatever ends it. Nested uses
        (a caller's context around `generate`, which opens its own) are one generation."""
        outer = self._depth == 0
        if outer:
            self.begin_generation()
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if outer:
                self.end_generation()

    def generate(self, x, max_new_tokens: int, sampler) -> Iterator[int]:
        """Prefill `x`, then per token: sampler.pick(logits, step) -> id, yield it, feed it back.

        sampler: a `sampling.Sampler`. Host sampling; the last token is not fed back (no wasted step)."""
        with self.generation():
            self.transfers.steps.clear()  # per-generation records; they would otherwise grow without bound
            logits = self.prefill(x, reuse=True)  # [V] model dtype, overwritten by the next step
            for step in range(max_new_tokens):
                token = sampler.pick(logits, step)
                yield token
                if step + 1 == max_new_tokens:
                    return
                logits = self.step(self.token_input(token, step), reuse=True)

    def token_input(self, token: int, step: int | None = None) -> np.ndarray:
        """The decoder's next host input for `token`: its embedding [1,1,H] (embedtable row), or [[token]]."""
        if self.info.drive == "ids":
            return np.array([[token]], np.int64)
        if token == self.folder.image_token_id:
            # the embedding model replaces image soft tokens by image feature rows; a generated one has none
            # (onnxruntime would fail inside the embedding graph, as onnxruntime-genai does)
            at = "" if step is None else f"at step {step} "
            raise ValueError(
                f"the model generated the image soft token (id {token}) {at}and the embedding model cannot "
                f"embed it without image features; pass stop=[{token}, ...] to end generation there"
            )
        if self._table is None:
            from ..embedtable import embedding_table

            self._table = embedding_table(self.folder, self.dtype)
        return self._table[token][None, None]  # [1,1,H]: the embedding model's output for this id


class BoundDecoder(Decoder):
    # True: decode steps bind the whole [1, max_length] mask (capture-safe, CUDA). False: bind the
    # [1, t+1] prefix of the same buffer (no copy), so CPU GroupQueryAttention, whose work follows
    # total_sequence_length = mask.shape[1], attends over t+1 keys instead of max_length.
    static_mask = True
    # True: `generate` launches the step fed with token i before yielding token i (module docstring); for
    # decoders whose launch returns before the step is done (CUDA). False (CPU): a launch runs the whole
    # step, so launching ahead would only hand each token over one step later.
    queue_ahead = False

    def __init__(self, folder: ModelFolder, session, device: Device, transfers: Transfers | None = None,
                 max_length: int | None = None):
        super().__init__(folder, device, transfers, max_length)
        self.session = session
        info, dec = self.info, folder.decoder
        self.name_x = dec.inputs["inputs_embeds" if info.drive == "embeds" else "input_ids"]
        self.name_mask = dec.inputs["attention_mask"]
        self.name_pos = dec.inputs.get("position_ids")
        self.name_logits = dec.outputs["logits"]
        self.past_names = info.past_names(dec)
        self.present_names = info.present_names(dec)
        if info.kv_layout == "shared":
            caps = layer_capacities(info.windows or [None] * info.num_layers, self.max_length, device,
                                    info.cache_slack)
            self.kv = FixedKV(caps, info.num_kv_heads, info.head_size, self.max_length, self.dtype, device)
        else:
            self.kv = ConcatKV(info.num_layers, info.num_kv_heads, info.head_size, self.dtype, device)
        # decode-step buffers: fixed addresses for the lifetime of the decoder
        x_shape = (1, 1, info.hidden_size) if info.drive == "embeds" else (1, 1)
        self.x_step = allocate(x_shape, self.dtype if info.drive == "embeds" else np.int64, device)
        self.pos_step = allocate((1, 1), np.int64, device)
        self.mask = allocate((1, self.max_length), np.int64, device)
        self.logits_step = self._logits_buffer()
        # [V]: reuse=True reads land here (a mapped logits_step is that array itself: the step writes it)
        self.logits_host = (self.logits_step.array.reshape(-1) if self.logits_step.mapped
                            else host_array(self.vocab, self.dtype, device))
        self.io_step = session.io_binding()
        self._bind_step(self.io_step)
        self.run_options = self._run_options(graph_id=-1)
        self.steps_run = 0  # decode-step runs over io_step (CUDA decoders split them by graph phase)
        self._concat = isinstance(self.kv, ConcatKV)
        self._one = np.ones(1, np.int64)
        # what one host-fed step moves, fixed now: input, position (if bound), mask slot in; logits out
        moves = [("h2d", self.x_step.nbytes, "embeds" if info.drive == "embeds" else "token"),
                 ("h2d", 8, "mask"), ("d2h", self.logits_step.nbytes, "logits")]
        if self.name_pos:
            moves.append(("h2d", 8, "position"))
        self.step_bytes = self.transfers.fixed(moves)
        self.prefill_buffers = PrefillBuffers(self)  # the prompt's buffers, reused by every prefill

    def _logits_buffer(self) -> Buffer:
        """The decode step's logits output [1,1,V] (a CUDA decoder that samples on the host maps it)."""
        return allocate((1, 1, self.vocab), self.dtype, self.device)

    # ---- binding ---------------------------------------------------------------------------
    def _bind_step(self, io) -> None:
        self.x_step.bind_input(io, self.name_x)
        if self.name_pos:
            self.pos_step.bind_input(io, self.name_pos)
        self.logits_step.bind_output(io, self.name_logits)
        if isinstance(self.kv, FixedKV):
            self.mask.bind_input(io, self.name_mask)  # static [1, max_length]: capture-safe
            self.kv.bind(io, self.past_names, self.present_names)

    def _run_options(self, graph_id: int):
        from ..sessions import ort

        ro = ort().RunOptions()
        # Set on CPU too (ignored there): onnxruntime's Python run_with_iobinding looks this key up on
        # every run, and a missing key costs ~30 us (an exception inside) -- 20% of a tiny CPU step.
        ro.add_run_config_entry("gpu_graph_id", str(graph_id))
        return ro

    def reset(self) -> None:
        """Forget the sequence: position 0, mask cleared on the device (no host copy)."""
        self.kv.reset()
        self.mask.fill(0)

    # ---- prefill ---------------------------------------------------------------------------
    def prefill(self, x, reuse: bool = False) -> np.ndarray:
        """Run the prompt; return the last position's logits [V] on the host (reuse: see module docstring)."""
        self.transfers.begin()
        try:
            logits, last = self.prefill_on_device(x)
            self.mark("prefill")
            return self._read_logits(logits, offset=last, reuse=reuse, count=True)
        finally:
            self.transfers.end()

    def prefill_on_device(self, x) -> tuple[Buffer, int]:
        """Run the prompt (uncaptured) over the reused prefill buffers (prompt_path.PrefillBuffers).

        x: host array [1,S,H] / ids [1,S] (uploaded), an OrtValue on the device, or `Staged` (the embedding
        model already wrote it into the prefill input buffer). Returns the logits buffer (left on the device)
        and the element offset of the last position's row in it. Copies land in the open transfers step.
        """
        S = prompt_length(x, self.max_length, self.folder.context_length)
        self.kv.reset()
        io = self.prefill_buffers.bind(x, S)
        self.session.run_with_iobinding(io, self._run_options(-1))
        if isinstance(self.kv, ConcatKV):
            self.kv.take_presents(io.get_outputs(), 1)
        elif not self.prefill_buffers.checked:  # the KV bindings never change: checking once is enough
            self.check_kv_outputs(io)
            self.prefill_buffers.checked = True
        self.kv.advance(S)
        return self.prefill_buffers.logits, self.prefill_buffers.last_row(S)

    def check_kv_outputs(self, io) -> None:
        """Structural guard: every present output is our KV buffer, on our device (never host memory)."""
        outs = io.get_outputs()
        expect = [b.ptr for pair in zip(self.kv.keys, self.kv.values) for b in pair]
        names = [n for pair in self.present_names for n in pair]
        for ov, ptr, name in zip(outs[1:], expect, names):
            if ov.device_name().lower() != self.device.kind or ov.data_ptr() != ptr:
                raise DecoderError(
                    f"KV output {name} resolved to {ov.device_name()} at {ov.data_ptr():#x}, not the bound "
                    f"{self.device} buffer at {ptr:#x}: the KV cache would round-trip"
                )

    def generate(self, x, max_new_tokens: int, sampler) -> Iterator[int]:
        if not self.queue_ahead:
            return super().generate(x, max_new_tokens, sampler)
        return self._generate_ahead(x, max_new_tokens, sampler)

    def _generate_ahead(self, x, max_new_tokens: int, sampler) -> Iterator[int]:
        """Decoder.generate's tokens, with every step after the first launched before the token that feeds it
        is yielded: the device runs it while the caller handles the token. The first token is yielded as soon
        as it is picked; no step is launched past the last token."""
        with self.generation():
            self.transfers.steps.clear()
            token = sampler.pick(self.prefill(x, reuse=True), 0)
            if max_new_tokens < 1:
                return
            yield token
            for step in range(1, max_new_tokens):
                if step == 1:
                    self.launch(self.token_input(token, 0))
                token = sampler.pick(self.collect(reuse=True), step)
                if step + 1 < max_new_tokens:
                    try:
                        nxt = self.token_input(token, step)
                    except ValueError:  # e.g. the image soft token: hand it over first, as Decoder.generate does
                        yield token
                        raise
                    self.launch(nxt)
                yield token

    # ---- host-fed decode step -----------------------------------------------------------------
    def feed(self, x: np.ndarray, stream: int | None = None) -> None:
        """Write the next input and its position/mask scalars into the bound buffers (bytes: step_bytes); CUDA:
        on `stream` (a stream pointer; None: the current stream)."""
        t = self.check_room()
        self.x_step.write(x, stream=stream)
        self.write_scalars(t, stream)

    def check_room(self) -> int:
        """The position the next step writes; DecoderError when the KV cache is full."""
        t = self.kv.position
        if t >= self.max_length:
            raise DecoderError(f"KV cache full: position {t} reached max_length={self.max_length}")
        return t

    def write_scalars(self, t: int, stream: int | None = None) -> None:
        """The step at position t's scalars: position_ids = t (if bound) and mask slot t = 1."""
        if self.name_pos:
            self.pos_step.write_scalar(t, stream=stream)
        self.mask.write(self._one, offset=t, stream=stream)

    def run_step(self) -> None:
        """Run one decode step over the bound buffers and advance the position."""
        t = self.kv.position
        if self._concat or not self.static_mask:
            self.mask.bind_input(self.io_step, self.name_mask, shape=(1, t + 1))
        if self._concat:
            self.kv.bind(self.io_step, self.past_names, self.present_names)
        self.session.run_with_iobinding(self.io_step, self.run_options)
        if self._concat:
            self.kv.take_presents(self.io_step.get_outputs(), 1)
        self.steps_run += 1
        self.kv.advance(1)

    def step(self, x: np.ndarray, reuse: bool = False) -> np.ndarray:
        self.launch(x)
        return self.collect(reuse)

    def launch(self, x: np.ndarray) -> None:
        """The first half of `step`: feed `x` and run (on the CPU to completion; CUDA decoders only queue it)."""
        self.feed(x)
        self.run_step()

    def collect(self, reuse: bool = False) -> np.ndarray:
        """The second half of `step`: the launched step's logits [V] on the host, and its byte record."""
        out = self._read_logits(self.logits_step, reuse=reuse)
        self.transfers.add(self.step_bytes)
        return out

    def _read_logits(self, buf: Buffer, offset: int = 0, reuse: bool = False, count: bool = False) -> np.ndarray:
        out = buf.copy_to_host(self.vocab, offset, self.logits_host)
        if count:
            self.transfers.note("d2h", out.nbytes, "logits")
        # reuse: the decoder's array in the model's dtype (sampling's greedy path reads float16 as is);
        # else a caller-owned float32 copy (numpy's float16 argmax/isfinite are ~10x slower than float32's)
        return out if reuse else out.astype(np.float32)
