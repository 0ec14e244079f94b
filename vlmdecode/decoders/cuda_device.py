"""Device mode's loop, a part of decoders.cuda.CudaDecoder (a mixin): the token never leaves the GPU.

Per token: the decoder's run, then two launches (cuda_kernels: argmax over the step's logits, or a CuPy
Philox draw by sample_unchecked; then `advance`, which writes the token's embedding, position_ids and the mask
slot into the decoder's bound inputs and the token into a ring slot); the host reads the ring as
`decoders.token_ring` says (by default each token while the next step runs; lookahead=False: every `sync_every`
tokens, the only syncs). Kernel argument lists are built once. Not here: the decoder's buffers, graph ids and
run options (decoders.cuda), the host-sampling step (decoders.cuda, decoders.base).
"""

from __future__ import annotations

import numpy as np

from ..buffers import Buffer, allocate
from ..sampling import Sampler, sample_unchecked
from ..sessions import make_session
from .cuda_kernels import MAX_SUPPRESS, argmax_blocks, device_kernels
from .token_ring import TokenRing


class DeviceLoop(TokenRing):
    """CudaDecoder's device mode (module docstring); uses the decoder's buffers, stream and run_step."""

    def _init_device_loop(self, sync_every: int, lookahead: bool) -> None:
        info = self.info
        self._partial, self._kernel = device_kernels(self.dtype)
        self._nparts = argmax_blocks(self.vocab)
        self._part_v = allocate((self._nparts,), np.float32, self.device)
        self._part_i = allocate((self._nparts,), np.int64, self.device)
        self._init_ring(sync_every, lookahead)
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

        self._advance_args = {g: [advance_args(g, k) for k in range(self.ring_len)] for g in (0, self.given.ptr)}
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

    def _device_generate(self, x, max_new_tokens: int, sampler: Sampler):
        tr = self.transfers
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
            yield from self._ring_tokens(max_new_tokens, sampler)

    def _queue_step(self, sampler: Sampler, step: int) -> None:
        """The run that picks token `step` into ring slot step % ring_len (no host sync)."""
        with self.stream:
            self.run_step()  # replay (no host feed: the kernel wrote the inputs)
            self._pick(self.logits_step, 0, step % self.ring_len, sampler, step)
        self.transfers.add(self.step_bytes)
