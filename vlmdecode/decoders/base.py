"""The IO-bound decoder shared by the CPU and CUDA decoders.

    prefill(x [1,S,H] | ids [1,S])  -> logits of the last prompt position   (uncaptured)
    step(x [1,1,H] | id [1,1])      -> logits [V] of the new position       (host-fed)

Logits come back as a new float32 array [V] by default. With reuse=True (the pipeline's host loop)
they come back in the model's dtype in one host array the decoder owns (page-locked on CUDA), which
the next prefill/step overwrites: no allocation and no float16 -> float32 pass per step.

Every input and output of a decode step is bound ONCE to a fixed buffer (`decoders.buffers`):
the one-token input, position_ids [1,1], a static attention mask [1,max_length] whose next slot is
set to 1 each step, logits [1,1,V] and the KV cache (`kvcache.FixedKV`, past and present sharing
one buffer). A step therefore copies only the new input and two int64 scalars in, and the logits
out; the KV never moves. With the Concat-growing `onnx` decoder (`kvcache.ConcatKV`) the mask is
bound as a growing prefix view of the same buffer and the KV OrtValues are rebound each step.

Not here: sampling, tokenization, the choice of device-side loops (decoders.cuda).
"""

from __future__ import annotations

import numpy as np

from ..devices import Device
from ..kvcache import ConcatKV, FixedKV, layer_capacities
from ..modelfolder import ModelFolder
from ..transfers import Transfers
from .buffers import Buffer, allocate, host_array


class DecoderError(RuntimeError):
    pass


class BoundDecoder:
    # True: decode steps bind the whole [1, max_length] mask (capture-safe, CUDA). False: bind the
    # [1, t+1] prefix of the same buffer (no copy), so CPU GroupQueryAttention, whose work follows
    # total_sequence_length = mask.shape[1], attends over t+1 keys instead of max_length.
    static_mask = True

    def __init__(self, folder: ModelFolder, session, device: Device, transfers: Transfers | None = None,
                 max_length: int | None = None):
        self.folder, self.session, self.device = folder, session, device
        self.transfers = transfers if transfers is not None else Transfers()
        info, dec = folder.info, folder.decoder
        self.info = info
        self.max_length = folder.capacity(max_length)  # the capacity rule: modelfolder's docstring
        self.dtype = np.dtype(info.dtype)
        self.vocab = folder.vocab_size
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
        self.logits_step = allocate((1, 1, self.vocab), self.dtype, device)
        self.logits_host = host_array(self.vocab, self.dtype, device)  # [V]: reuse=True reads land here
        self.io_step = session.io_binding()
        self._bind_step(self.io_step)
        self.run_options = self._run_options(graph_id=-1)
        self.steps_run = 0  # decode-step runs over io_step (CUDA decoders split them by graph phase)
        self._concat = isinstance(self.kv, ConcatKV)
        # host staging for the two int64 scalars a step writes, filled in place (no per-step allocation)
        self._pos_host = np.zeros(1, np.int64)
        self._one = np.ones(1, np.int64)

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

    @property
    def position(self) -> int:
        return self.kv.position

    def reset(self) -> None:
        """Forget the sequence: position 0, mask cleared (one host write of the mask)."""
        self.kv.reset()
        self.transfers.upload(self.mask, np.zeros(self.max_length, np.int64), "mask")

    # ---- prefill ---------------------------------------------------------------------------
    def begin_generation(self) -> None:
        """Hook for decoders that hold per-generation state (CUDA graph ids)."""

    def end_generation(self) -> None:
        """Hook, called when a generation ends (also when it is abandoned)."""

    def prefill(self, x, reuse: bool = False) -> np.ndarray:
        """Run the prompt; return the last position's logits [V] on the host (reuse: see module docstring)."""
        logits, S = self.prefill_on_device(x)
        return self._read_logits(logits, offset=self.last_row(S) * self.vocab, reuse=reuse)

    def last_row(self, S: int) -> int:
        """Row of the prefill logits that holds the last prompt position (0 when the LM head is pruned)."""
        return 0 if self.info.logits_last_only else S - 1

    def prefill_on_device(self, x) -> tuple[Buffer, int]:
        """Run the prompt (uncaptured). x: host array [1,S,H] / ids [1,S], or an OrtValue on the device.

        Returns the logits buffer [1,S,V] (left on the device) and S.
        """
        self.reset()
        S = int(x.shape()[1] if callable(getattr(x, "shape", None)) else x.shape[1])
        if S <= 0 or S >= self.max_length:
            raise DecoderError(f"prompt of {S} tokens: must be between 1 and max_length-1={self.max_length - 1}; "
                               f"pass a larger max_length= to load() (at most the model's context_length "
                               f"{self.folder.context_length})")
        io = self.session.io_binding()
        keep = []  # buffers bound by address must outlive the run
        if isinstance(x, np.ndarray):
            buf = allocate(x.shape, x.dtype, self.device)
            self.transfers.upload(buf, x, "prompt")
            buf.bind_input(io, self.name_x)
            keep.append(buf)
        else:
            io.bind_ortvalue_input(self.name_x, x)
        self.transfers.upload(self.mask, np.ones(S, np.int64), "mask")
        self.mask.bind_input(io, self.name_mask, shape=(1, S))  # [1, current length] for the prompt
        if self.name_pos:
            pos = allocate((1, S), np.int64, self.device)
            self.transfers.upload(pos, np.arange(S, dtype=np.int64), "position")
            pos.bind_input(io, self.name_pos)
            keep.append(pos)
        logits = allocate((1, 1 if self.info.logits_last_only else S, self.vocab), self.dtype, self.device)
        logits.bind_output(io, self.name_logits)
        self.kv.bind(io, self.past_names, self.present_names)
        self.session.run_with_iobinding(io, self._run_options(-1))
        if isinstance(self.kv, ConcatKV):
            self.kv.take_presents(io.get_outputs(), 1)
        else:
            self.check_kv_outputs(io)
        self.kv.position = S
        self._prefill_keep = keep
        return logits, S

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

    # ---- host-fed decode step -----------------------------------------------------------------
    def feed(self, x: np.ndarray) -> None:
        """Write the next input and its position/mask scalars into the bound buffers."""
        t = self.kv.position
        if t >= self.max_length:
            raise DecoderError(f"KV cache full: position {t} reached max_length={self.max_length}")
        self.transfers.upload(self.x_step, x, "embeds" if self.info.drive == "embeds" else "token")
        if self.name_pos:
            self._pos_host[0] = t
            self.transfers.upload(self.pos_step, self._pos_host, "position")
        self.transfers.upload(self.mask, self._one, "mask", offset=t)

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
        self.kv.position = t + 1

    def step(self, x: np.ndarray, reuse: bool = False) -> np.ndarray:
        self.feed(x)
        self.run_step()
        return self._read_logits(self.logits_step, reuse=reuse)

    def _read_logits(self, buf: Buffer, offset: int = 0, reuse: bool = False) -> np.ndarray:
        out = self.transfers.download(buf, "logits", count=self.vocab, offset=offset, out=self.logits_host)
        # reuse: the decoder's array in the model's dtype (sampling's greedy path reads float16 as is);
        # else a caller-owned float32 copy (numpy's float16 argmax/isfinite are ~10x slower than float32's)
        return out if reuse else out.astype(np.float32)
