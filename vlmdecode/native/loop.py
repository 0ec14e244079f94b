"""The native decoder's device loop (a mixin of `native.decoder.NativeDecoder`): token ids out of the id ring
the advance kernel writes one at a time while the next step runs (lookahead, the default), or every `sync_every`
tokens.

What it is: `generate` (the decoders.base contract) and its two loop orderings over `NativeDecoder`'s replays.
What it is not: the step, the prefill or the first pick (`native.decoder`).
"""

from __future__ import annotations

from ..sampling import NonFiniteLogitsError, Sampler


class NativeLoop:
    def generate(self, x, max_new_tokens: int, sampler: Sampler):
        """Token ids (decoders.base contract); everything but the ids stays on the GPU: greedy replays the step
        with advance captured, sampling replays the body and draws with CuPy. The host reads the id ring
        every `sync_every` tokens (the only sync), or, with lookahead, each token while the next step runs."""
        tr = self.transfers
        with self.generation():
            tr.steps.clear()
            with self.stream:
                tr.begin()
                self._start(x, sampler)
                tr.note("d2h", 8, "token")
                tr.end()
            loop = self._lookahead if self.lookahead and self.sync_every == 1 else self._batched
            yield from loop(max_new_tokens, sampler)

    def _queue_step(self, sampler: Sampler, step: int) -> None:
        """Replay the step that picks token `step` (no host sync)."""
        greedy = not sampler.params.do_sample
        with self.stream:
            self.replay(greedy)
            if not greedy:
                self._pick(self.logits, sampler, step)
        self.transfers.add(self.step_bytes)

    @staticmethod
    def _check(tok: int, step: int) -> int:
        if tok < 0:
            raise NonFiniteLogitsError(f"non-finite logits at step {step}: NaN or +inf, or every logit -inf", step,
                                       (0,))
        return tok

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
        events = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        events[0].record(self.stream)  # after the first pick
        queued = 1
        for i in range(max_new_tokens):
            if queued < max_new_tokens:
                self._queue_step(sampler, queued)
                events[queued % 2].record(self.stream)
                queued += 1
            self.copy_stream.wait_event(events[i % 2])
            with self.copy_stream:  # token i, read while step i + 1 runs
                tok = int(self.ring.copy_to_host(1, i % 2, self.ring_host[:1])[0])
            yield self._check(tok, i)
