"""The native decoder's device loop (a mixin of `native.decoder.NativeDecoder`): the ids come out of the token
ring the advance kernel writes (`decoders.token_ring`: one at a time while the next step runs, the default, or
every `sync_every` tokens).

What it is: `generate` (the decoders.base contract) and the step it queues per token over `NativeDecoder`'s
replays. What it is not: the step, the prefill or the first pick (`native.decoder`), the ring's reading order
(`decoders.token_ring`).
"""

from __future__ import annotations

from ..decoders.token_ring import TokenRing
from ..sampling import Sampler


class NativeLoop(TokenRing):
    def generate(self, x, max_new_tokens: int, sampler: Sampler):
        """Token ids (decoders.base contract); everything but the ids stays on the GPU: greedy replays the step
        with advance captured, sampling replays the body and draws with CuPy (decoders.token_ring for when the
        host reads the ids)."""
        tr = self.transfers
        with self.generation():
            tr.steps.clear()
            with self.stream:
                tr.begin()
                self._start(x, sampler)
                tr.note("d2h", 8, "token")
                tr.end()
            yield from self._ring_tokens(max_new_tokens, sampler)

    def _queue_step(self, sampler: Sampler, step: int) -> None:
        """Replay the step that picks token `step` (no host sync; its advance writes ring slot step % ring_len)."""
        greedy = not sampler.params.do_sample
        with self.stream:
            self.replay(greedy)
            if not greedy:
                self._pick(self.logits, sampler, step)
        self.transfers.add(self.step_bytes)
