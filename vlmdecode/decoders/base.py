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
from ..kvcache import ConcatKV, FixedKV
from ..modelfolder import ModelFolder
from ..prompt_path import PrefillBuffers, Staged
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
        if max_length is not None:
            ctx = folder.raw.get("model", {}).get("context_length")
            limit = max(folder.max_length, ctx if isinstance(ctx, int) and not isinstance(ctx, bool) else 0)
            if not isinstance(max_length, int) or isinstance(max_length, bool) or not 1 < max_length <= limit:
                raise ValueError(f"max_length={max_length!r} must be an int in [2, {limit}] (the model's context "
                                 f"length, from {folder.root.name}/genai_config.json)")
        self.max_length = max_length or folder.max_length
        self.dtype = np.dtype(info.dtype)
        self.vocab = folder.vocab_size
        self.name_x = dec.inputs["inputs_embeds" if info.drive == "embeds" else "input_ids"]
        self.name_mask = dec.inputs["attention_mask"]
        self.name_pos = dec.inputs.get("position_ids")
        self.name_logits = dec.outputs["logits"]
        self.past_names = info.past_names(dec)
        self.present_names = info.present_names(dec)
        if info.kv_layout == "shared":
            self.kv = FixedKV(info.num_layers, info.num_kv_heads, info.head_size, self.max_length, self.dtype, device)
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
        self.prefill_buffers = PrefillBuffers(self)  # the prompt's buffers, reused by every prefill

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
        """Forget the sequence: position 0, mask cleared on the device (no host copy)."""
        self.kv.reset()
        self.mask.fill(0)

    # ---- prefill ---------------------------------------------------------------------------
    def begin_generation(self) -> None:
        """Hook for decoders that hold per-generation state (CUDA graph ids)."""

    def end_generation(self) -> None:
        """Hook, called when a generation ends (also when it is abandoned)."""

    def prefill(self, x, reuse: bool = False, timer=None) -> np.ndarray:
        """Run the prompt; return the last position's logits [V] on the host (reuse: see module docstring).
        timer: a prompt_path.PhaseTimer, marked between the run and the logits read."""
        logits, last = self.prefill_on_device(x)
        if timer is not None:
            timer.mark("prefill")
        return self._read_logits(logits, offset=last, reuse=reuse)

    def prefill_on_device(self, x) -> tuple[Buffer, int]:
        """Run the prompt (uncaptured) over the reused prefill buffers (prompt_path.PrefillBuffers).

        x: host array [1,S,H] / ids [1,S] (uploaded), an OrtValue on the device, or `Staged` (the
        embedding model already wrote it into the prefill input buffer). Returns the logits buffer (left
        on the device) and the element offset of the last position's row in it.
        """
        if isinstance(x, Staged):
            S = x.length
        else:
            S = int(x.shape()[1] if callable(getattr(x, "shape", None)) else x.shape[1])
        if S <= 0 or S >= self.max_length:
            raise DecoderError(f"prompt of {S} tokens: must be between 1 and max_length-1={self.max_length - 1}")
        self.kv.reset()
        io = self.prefill_buffers.bind(x, S)
        self.session.run_with_iobinding(io, self._run_options(-1))
        if isinstance(self.kv, ConcatKV):
            self.kv.take_presents(io.get_outputs(), 1)
        elif not self.prefill_buffers.checked:  # the KV bindings never change: checking once is enough
            self.check_kv_outputs(io)
            self.prefill_buffers.checked = True
        self.kv.position = S
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
