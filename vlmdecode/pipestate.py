"""What one Pipeline shares between its calls: the generation guard (one KV cache) and the feature cache.

A Pipeline owns ONE KV cache, so it runs one generation at a time. `GenerationGuard.tokens(it)` wraps a
generation's token iterator:

  * another thread starting a generation while one is under way (running, or a stream() suspended between
    tokens) gets `PipelineBusyError` at once (non-blocking: never a wait, never a deadlock);
  * in the same thread, a new generation takes the cache over (the only way to do so while a stream is
    suspended): the old generation is closed first (its end-of-generation hooks run), and resuming the old
    stream raises `StaleStreamError` instead of continuing on a cache that holds another sequence.

Ownership is an epoch (a counter) plus the owning thread, both under one small lock held only to read or
change them. `FeatureCache` is the bounded image-feature cache: an LRU of `FEATURE_CACHE_SIZE` entries.
Not here: the generation itself (pipeline, decoders).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

FEATURE_CACHE_SIZE = 16  # images whose vision output a Pipeline keeps (tiny: 8 KB each; 256 x 1152 fp16: 576 KB)


class PipelineBusyError(RuntimeError):
    """A generation was started while another thread's generation holds the pipeline's KV cache."""


class StaleStreamError(RuntimeError):
    """A stream was resumed after another generation took over the pipeline's KV cache."""


class GenerationGuard:
    """One generation at a time per KV cache (see the module docstring)."""

    def __init__(self):
        self._mu = threading.Lock()
        self._epoch = 0
        self._owner = None  # (thread id, epoch, token iterator) of the generation holding the cache

    def tokens(self, it):
        """Yield `it`'s tokens while this generation holds the cache; raise once another one took it."""
        epoch = self._claim(it)
        try:
            while True:
                with self._mu:
                    if self._epoch != epoch:
                        raise StaleStreamError(
                            "this stream lost the pipeline's KV cache: another generate()/stream() ran on the "
                            "pipeline after it started; finish or close a stream before starting another, or "
                            "use one Pipeline per concurrent stream")
                try:
                    token = next(it)
                except StopIteration:
                    return
                yield token
        finally:
            self._release(epoch)

    def _claim(self, it) -> int:
        with self._mu:
            if self._owner is not None:
                thread, _, old = self._owner
                if thread != threading.get_ident():
                    raise PipelineBusyError(
                        "this Pipeline is generating in another thread (or holds that thread's unfinished "
                        "stream); make one Pipeline per thread, or finish/close the other stream first")
                old.close()  # same thread: the suspended stream gives its cache up (its finally runs now)
            self._epoch += 1
            self._owner = (threading.get_ident(), self._epoch, it)
            return self._epoch

    def _release(self, epoch: int) -> None:
        with self._mu:
            if self._owner is not None and self._owner[1] == epoch:
                _, _, it = self._owner
                self._owner = None
                it.close()


class FeatureCache:
    """LRU of image features keyed by the pixel_values' sha256: at most `size` entries, thread-safe."""

    def __init__(self, size: int = FEATURE_CACHE_SIZE):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._mu = threading.Lock()

    def get(self, key):
        with self._mu:
            if key in self._items:
                self._items.move_to_end(key)
            return self._items.get(key)

    def put(self, key, value) -> None:
        with self._mu:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._mu:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
