"""The host's side of a device-side token loop (device mode, native mode): the pick kernel writes token n's id into
slot n % ring_len of a small device ring; the host reads the ring every `sync_every` tokens, or, with lookahead
(sync_every 1, the default), token n while step n + 1 already runs, so the GPU never waits on the host between
tokens. A consumer that stops early then leaves that one queued step run: the KV is one position past the last
token fed back and the next prefill starts over (decoders.base's queue_ahead, the same rule).

What it is: `TokenRing`, a mixin with `_init_ring` (the ring, its page-locked host copy, a copy stream),
`_ring_tokens` (the ids after the first pick) and `loop_order(lookahead)` (either order for a block of calls).
What it is not: the prefill, the first pick or the step: the decoder provides `_queue_step(sampler, step)`, which
queues the step that picks token `step` into slot step % ring_len without a host sync, and the attributes cp,
stream, device and transfers.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..buffers import allocate, host_array
from ..sampling import NonFiniteLogitsError, Sampler


def check_sync_every(sync_every: int) -> int:
    """The one check of `sync_every` (both decoders call it before any set-up work)."""
    if sync_every < 1:
        raise ValueError(f"sync_every must be >= 1, got {sync_every}")
    return sync_every


class TokenRing:
    def _init_ring(self, sync_every: int, lookahead: bool) -> None:
        """sync_every: already checked (check_sync_every, before the decoder's set-up)."""
        self.sync_every, self.lookahead = sync_every, bool(lookahead)
        self.ring_len = max(2, sync_every)  # lookahead reads one slot while the next step fills the other
        self.ring = allocate((self.ring_len,), np.int64, self.device)
        self.ring_host = host_array(self.ring_len, np.int64, self.device)
        self.copy_stream = self.cp.cuda.Stream(non_blocking=True)

    @contextlib.contextmanager
    def loop_order(self, lookahead: bool):
        """Generations inside the block read the ring with lookahead on or off (off: a caller that reads the
        logits buffer per yielded token sees that token's row); the decoder's own setting is restored after."""
        was, self.lookahead = self.lookahead, bool(lookahead)
        try:
            yield self
        finally:
            self.lookahead = was

    @staticmethod
    def _check(tok: int, step: int) -> int:
        if tok < 0:
            raise NonFiniteLogitsError(f"non-finite logits at step {step}: NaN or +inf, or every logit -inf", step,
                                       (0,))
        return tok

    def _ring_tokens(self, max_new_tokens: int, sampler: Sampler):
        """Token ids 0 .. max_new_tokens - 1, token 0's pick already queued (slot 0)."""
        loop = self._lookahead if self.lookahead and self.sync_every == 1 else self._batched
        yield from loop(max_new_tokens, sampler)

    def _batched(self, max_new_tokens: int, sampler: Sampler):
        k, pending, done = self.sync_every, 1, 0
        while True:
            if pending == k or done + pending == max_new_tokens:
                start = done % self.ring_len  # k == ring_len, or one slot at a time: never wraps
                with self.stream:
                    ids = self.ring.copy_to_host(pending, start, self.ring_host[:pending]).tolist()  # the sync
                for i, tok in enumerate(ids):
                    yield self._check(tok, done + i)
                done, pending = done + pending, 0
                if done == max_new_tokens:
                    return
            self._queue_step(sampler, done + pending)
            pending += 1

    def _lookahead(self, max_new_tokens: int, sampler: Sampler):
        cp = self.cp
        events = [cp.cuda.Event(disable_timing=True) for _ in range(self.ring_len)]
        events[0].record(self.stream)  # after the first pick
        queued = 1
        for i in range(max_new_tokens):
            if queued < max_new_tokens:
                self._queue_step(sampler, queued)
                events[queued % self.ring_len].record(self.stream)
                queued += 1
            self.copy_stream.wait_event(events[i % self.ring_len])
            with self.copy_stream:  # token i, read while step i + 1 runs
                tok = int(self.ring.copy_to_host(1, i % self.ring_len, self.ring_host[:1])[0])
            yield self._check(tok, i)
