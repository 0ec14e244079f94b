"""Next-token selection from logits [B, V]: greedy, or seeded sampling with temperature, top-k, top-p and min-p.

Written once against an array module `xp` (numpy, or cupy when the logits are a cupy array), so the same code
runs on the host and on the GPU; CuPy is never imported here and never required. What this module is not:
no logits processors that need history (repetition penalty, no-repeat n-grams), no beam search, no stopping
rules, and no model or session code; it only turns one step's logits into token ids.

Filters (`filter_logits`) run in the order Hugging Face's `generate` applies its warpers:

    1. temperature   logits / temperature
    2. top-k         keep the logits >= the k-th largest; every token tied with the k-th is kept (as HF)
    3. top-p         nucleus over softmax of what top-k left: keep the smallest set of most probable tokens whose
                     mass is >= top_p, i.e. keep token t iff the mass of tokens strictly more probable than t is
                     < top_p. The top token is always kept, and so is every token tied in probability with a kept
                     one (HF's unstable sort makes its choice among tied tokens at the boundary unspecified;
                     keeping all of them is the order-independent choice and matches HF's top-k)
    4. min-p         keep tokens with p >= min_p * p_max over softmax of what top-p left, computed as
                     exp(logit - max logit) >= min_p (the ratio does not depend on normalisation)

`SamplingParams.suppress` ids are set to -inf first, in greedy and sampling alike (transformers'
`suppress_tokens`): they are never picked. Removed tokens become -inf. Every filter keeps the top
token, so a row never empties. Input logits may be
float16, float32 or float64 and may hold -inf (already masked tokens); NaN and +inf raise
`NonFiniteLogitsError` (a ValueError), as does a row in which every token is -inf. All arithmetic is float64:
top-p and the sampling CDF sum probabilities over the whole vocabulary (262k for Gemma 3), where float32
cumulative sums drift, and a float16 logit divided by a small temperature would overflow float16.

`sample` takes the uniform draws from the caller, so it is a pure function of its inputs and the same code
serves numpy and cupy. `Sampler` owns the draws: a counter-based generator, Philox4x32-10 (Salmon et al., SC'11;
the Random123 reference) keyed by the seed with counter (step, row), computed by the same integer operations in
numpy and in a CuPy kernel (`vlmdecode.philox`), so a seed gives bit-identical uniforms on the host
and on the GPU and the same tokens in every decode mode (only the step number and the row matter, never how many
draws happened before). Two 32-bit outputs make one float64 in [0, 1) with 53 random bits, exactly as numpy's
`random()` builds a double. Device-side decode loops use `sample_unchecked`, which never synchronises: bad rows
come back as token -1 instead of raising.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

from .philox import philox_uniform, philox_uniform_cupy

Array = Any  # numpy.ndarray or cupy.ndarray


def array_module(x: Array) -> Any:
    """numpy, or cupy when `x` is a cupy array. A cupy array implies cupy is already imported, so this never imports."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        return cupy
    return np


# ---------------------------------------------------------------------------------------------------------------
# parameters


def _is_real(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token. Defaults are greedy; with do_sample, 0 / 1.0 / 0.0 turn top-k / top-p / min-p off.

    The filters only matter when do_sample is True: greedy takes the argmax of the raw logits.
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None
    suppress: tuple = ()  # token ids never picked: -inf before greedy and before the filters (HF suppress_tokens)

    def __post_init__(self) -> None:
        # One exception type, ValueError, for every bad field, wrong types included.
        # `not (lo < v <= hi)` rather than `v <= lo or v > hi`, so that NaN is rejected too.
        if not isinstance(self.do_sample, bool):
            raise ValueError(f"do_sample must be a bool, got {self.do_sample!r}")  # noqa: TRY004
        if not _is_real(self.temperature) or not (0 < self.temperature < math.inf):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not _is_real(self.top_p) or not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be a number with 0 < top_p <= 1 (1 = off), got {self.top_p!r}")
        if not _is_real(self.min_p) or not (0 <= self.min_p < 1):
            raise ValueError(f"min_p must be a number with 0 <= min_p < 1 (0 = off), got {self.min_p!r}")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < 2**64):
            raise ValueError(f"seed must be None or an integer in [0, 2**64) (the Philox key), got {self.seed!r}")
        if isinstance(self.suppress, (str, bytes)) or not all(_is_int(i) and i >= 0 for i in self.suppress):
            raise ValueError(f"suppress must be a sequence of token ids >= 0, got {self.suppress!r}")
        object.__setattr__(self, "suppress", tuple(int(i) for i in self.suppress))


# ---------------------------------------------------------------------------------------------------------------
# checks


class NonFiniteLogitsError(ValueError):
    """Logits hold NaN or +inf, or a row is entirely -inf. `step` (or None) and the bad batch `rows` are attributes."""

    def __init__(self, message: str, step: int | None, rows: tuple[int, ...]):
        super().__init__(message)
        self.step = step
        self.rows = rows


def _check_shape(logits: Array) -> None:
    if getattr(logits, "ndim", None) != 2 or logits.shape[-1] < 1:
        raise ValueError(f"logits must be a 2-D array [batch, vocab] with vocab >= 1, got shape "
                         f"{getattr(logits, 'shape', None)}")
    if logits.dtype.kind != "f":
        raise ValueError(f"logits must be float16, float32 or float64, got {logits.dtype}")


def _rows(mask: Array) -> list[int]:
    # [B] bool -> host list of row indices; .tolist() works for numpy and cupy alike.
    return array_module(mask).nonzero(mask)[0].tolist()


def check_finite(logits: Array, step: int | None = None) -> None:
    """Raise NonFiniteLogitsError if any row holds NaN or +inf, or has every token at -inf (nothing to pick).

    -inf entries are otherwise allowed: they are masked tokens. The message names `step` when given and the bad
    batch rows; without a step it starts "non-finite logits:" so a caller can catch and re-raise with its own.
    One device-to-host sync on the happy path (a single boolean).
    """
    _check_shape(logits)
    xp = array_module(logits)
    nonfinite = (xp.isnan(logits) | (logits == xp.inf)).any(axis=-1)  # [B]
    all_masked = (logits == -xp.inf).all(axis=-1)  # [B]
    if not bool((nonfinite | all_masked).any()):
        return
    where = "non-finite logits" if step is None else f"non-finite logits at step {step}"
    bad, empty = _rows(nonfinite), _rows(all_masked)
    problems = []
    if bad:
        problems.append(f"batch rows {bad} contain NaN or +inf")
    if empty:
        problems.append(f"batch rows {empty} are entirely -inf (every token masked)")
    raise NonFiniteLogitsError(f"{where}: {'; '.join(problems)}", step, tuple(sorted(set(bad) | set(empty))))


# ---------------------------------------------------------------------------------------------------------------
# filters; x is float64 [B, V], -inf marks removed tokens


def _softmax(x: Array, xp: Any) -> Array:
    # [B, V] -> [B, V]; each row has a finite max (checked), so -inf -> 0 and nothing is NaN.
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _top_k(x: Array, k: int, xp: Any) -> Array:
    vocab = x.shape[-1]
    if k == 0 or k >= vocab:
        return x
    kth = xp.partition(x, vocab - k, axis=-1)[:, vocab - k, None]  # [B, 1] the k-th largest logit
    return xp.where(x >= kth, x, -xp.inf)  # >=: ties with the k-th all stay, as in HF


def _top_p(x: Array, top_p: float, xp: Any) -> Array:
    if top_p >= 1.0:
        return x  # off; also avoids rounding in the cumulative sum dropping tokens when top_p == 1
    p = _softmax(x, xp)  # [B, V]
    p_desc = xp.flip(xp.sort(p, axis=-1), axis=-1)  # [B, V] most probable first
    cum = xp.cumsum(p_desc, axis=-1)
    mass_before = xp.concatenate([xp.zeros_like(cum[:, :1]), cum[:, :-1]], axis=-1)  # [B, V] exclusive cumsum
    # Kept sorted positions form a prefix (mass_before is non-decreasing) of length >= 1 (mass_before[0] = 0 < top_p).
    n_keep = (mass_before < top_p).sum(axis=-1, keepdims=True)  # [B, 1]
    threshold = xp.take_along_axis(p_desc, n_keep - 1, axis=-1)  # [B, 1] least probability kept
    # p >= threshold keeps every token tied with the last kept one: for a tie group the mass strictly above it is
    # mass_before at the group's first position, which is < top_p whenever any of the group is in the prefix.
    return xp.where(p >= threshold, x, -xp.inf)


def _min_p(x: Array, min_p: float, xp: Any) -> Array:
    if min_p == 0.0:
        return x
    ratio = xp.exp(x - x.max(axis=-1, keepdims=True))  # [B, V] p / p_max; the top token has 1 > min_p
    return xp.where(ratio >= min_p, x, -xp.inf)


def _suppressed(x: Array, ids: tuple, xp: Any) -> Array:
    """x with the columns `ids` (those inside the vocabulary) at -inf; x itself when there are none."""
    cols = [i for i in ids if i < x.shape[-1]]
    if not cols:
        return x
    x = x.copy()
    x[:, cols] = -xp.inf
    return x


def _filter(logits: Array, params: SamplingParams, xp: Any) -> Array:
    x = _suppressed(logits.astype(xp.float64), params.suppress, xp)  # [B, V], a copy
    if params.temperature != 1.0:
        x = x / params.temperature
    x = _top_k(x, params.top_k, xp)
    x = _top_p(x, params.top_p, xp)
    return _min_p(x, params.min_p, xp)


def filter_logits(logits: Array, params: SamplingParams) -> Array:
    """Temperature, then top-k, top-p, min-p (see the module docstring). [B, V] -> [B, V] float64, removed = -inf.

    Applies the filters whatever params.do_sample says. Raises NonFiniteLogitsError on NaN / +inf / all -inf rows.
    """
    check_finite(logits)
    return _filter(logits, params, array_module(logits))


# ---------------------------------------------------------------------------------------------------------------
# selection


def _inverse_cdf(probs: Array, uniform: Array, xp: Any) -> Array:
    """Token per row whose CDF interval holds uniform * row total. probs [B, V] float64, uniform [B] -> [B] int64."""
    cdf = xp.cumsum(probs, axis=-1)  # [B, V] non-decreasing; flat across zero-probability tokens
    target = uniform[:, None] * cdf[:, -1:]  # [B, 1]; scaled by the row's own total, so its rounding biases nothing
    # The count of cdf <= target is the first index with cdf > target; cdf rises there, so that token has p > 0
    # and masked tokens are never chosen.
    ids = (cdf <= target).sum(axis=-1)  # [B]
    # A u just below 1 can round target up to the total (ids = V, or past the last token with p > 0): clamp.
    last_positive = probs.shape[-1] - 1 - xp.argmax(xp.flip(probs > 0, axis=-1), axis=-1)  # [B]
    return xp.minimum(ids, last_positive).astype(xp.int64)


def _f16_keys(bits: np.ndarray) -> np.ndarray:
    """float16 bit patterns (viewed as int16) -> int16 keys in the order of the (non-NaN) float values: a
    negative float's magnitude bits are flipped and shifted by one, so -0.0 and +0.0 share key 0."""
    sign = bits >> 15  # 0 or -1
    return (bits ^ (sign & 0x7FFF)) - sign


def _greedy_host(logits: np.ndarray, step: int | None) -> np.ndarray:
    """argmax [B] of numpy logits, first maximum on ties, with check_finite's errors, in one or two passes.

    numpy's argmax returns the first NaN if there is one, so the picked value alone says whether a row is
    bad: NaN or +inf, or -inf (then every entry is -inf). float16 (numpy's own float16 argmax, or a float32
    copy, costs ~10x more at V=262144) is read as int16 bits: one pass finds NaNs (magnitude bits above
    +inf's), one takes the argmax of the bits, which orders positive floats as floats do; a row whose top
    is not positive (every value <= 0, where sign-magnitude bits do not order) takes _f16_keys' argmax.
    Any bad row: check_finite raises with its full message."""
    _check_shape(logits)
    bad = False
    if logits.dtype == np.float16:
        bits = logits.view(np.int16)
        bad = bool(((bits & 0x7FFF).max(axis=-1) > 0x7C00).any())  # 0x7C00: inf; above it: NaN
        ids = bits.argmax(axis=-1)
        if (np.take_along_axis(bits, ids[:, None], axis=-1) <= 0).any():
            ids = _f16_keys(bits).argmax(axis=-1)
    else:
        ids = logits.argmax(axis=-1)
    top = np.take_along_axis(logits, ids[:, None], axis=-1)
    if bad or not np.isfinite(top).all():
        check_finite(logits, step)  # raises: NaN, +inf, or a row of -inf only
    return ids.astype(np.int64)


def sample(logits: Array, params: SamplingParams, uniform: Array | None = None, *, step: int | None = None) -> Array:
    """Token ids [B] int64, on the logits' device.

    Greedy (params.do_sample False): argmax of the raw logits, the first maximum on ties; `uniform` is ignored and
    may be None. Sampling: inverse-CDF draw from softmax(filter_logits(logits, params)), one u in [0, 1) per row
    from `uniform` [B] (numpy, or the logits' array module). Same logits, params and uniform -> same ids.
    Raises NonFiniteLogitsError (a ValueError) naming `step` when the logits hold NaN / +inf or an all -inf row.
    """
    xp = array_module(logits)
    if not params.do_sample and xp is np:
        ids = _greedy_host(logits, step)  # the checks below, folded into the argmax's own passes
        if params.suppress and np.isin(ids, params.suppress).any():  # rare: mask a copy and pick again
            ids = _greedy_host(_suppressed(logits, params.suppress, np), step)
        return ids
    check_finite(logits, step)
    if not params.do_sample:
        return xp.argmax(_suppressed(logits, params.suppress, xp), axis=-1).astype(xp.int64)
    if uniform is None:
        raise ValueError("sample: do_sample=True needs `uniform`, one draw in [0, 1) per batch row")
    u = xp.asarray(uniform, dtype=xp.float64).reshape(-1)  # [B]
    if u.shape[0] != logits.shape[0]:
        raise ValueError(f"sample: uniform has {u.shape[0]} draws for {logits.shape[0]} batch rows")
    probs = _softmax(_filter(logits, params, xp), xp)  # [B, V] float64
    return _inverse_cdf(probs, u, xp)


def sample_unchecked(logits: Array, params: SamplingParams, uniform: Array) -> Array:
    """`sample` without the host-side checks, for device loops: ids [B] int64 on the logits' device, -1 for a row
    that holds NaN / +inf or is entirely -inf (the rule `check_finite` raises on). No device-to-host sync."""
    _check_shape(logits)
    xp = array_module(logits)
    bad = (xp.isnan(logits) | (logits == xp.inf) | (logits == -xp.inf).all(axis=-1, keepdims=True)).any(axis=-1)
    clean = xp.where(bad[:, None], 0, logits)  # any finite row: its draw is discarded below
    if not params.do_sample:
        ids = xp.argmax(_suppressed(clean, params.suppress, xp), axis=-1).astype(xp.int64)
    else:
        u = xp.asarray(uniform, dtype=xp.float64).reshape(-1)
        ids = _inverse_cdf(_softmax(_filter(clean, params, xp), xp), u, xp)
    return xp.where(bad, -1, ids)


class Sampler:
    """`sample` with its own draws: `Sampler(params)(logits [B, V], step) -> ids [B] int64`, `pick(row, step) -> int`.

    Draw for (step, row) = Philox4x32-10 keyed by params.seed (a fresh random seed when None, fixed for this
    sampler); numpy and cupy compute the same bits (module docstring), so the same seed gives the same tokens on the
    CPU and the GPU, in every decode mode. Greedy draws nothing. step None: the step after the last one drawn.
    """

    def __init__(self, params: SamplingParams):
        self.params = params
        self.seed = params.seed if params.seed is not None else int(np.random.SeedSequence().entropy % 2**64)
        self._next_step = 0

    def uniform(self, step: int, n: int = 1, xp: Any = np) -> Array:
        """[n] float64 draws in [0, 1) of rows 0..n-1 at `step`, as an array of module `xp` (cupy: computed there)."""
        if xp is np:
            return philox_uniform(self.seed, step, n)
        return philox_uniform_cupy(xp, self.seed, step, n)

    def pick(self, row: np.ndarray, step: int) -> int:
        """One token from host logits [V] (B = 1): greedy is one argmax + one finiteness test of the top value
        (float16 rows above 4096 entries take `_greedy_host`'s bit-level passes); bad rows raise as `sample`."""
        if not self.params.do_sample:
            if row.dtype != np.float16 or row.shape[0] <= 4096:
                i = int(row.argmax())  # NaN: numpy returns the first NaN, so the test below catches it
                if math.isfinite(row[i]) and i not in self.params.suppress:
                    return i
            return int(sample(row[None], self.params, None, step=step)[0])  # bit-level passes; suppress masks
        return int(sample(row[None], self.params, self.uniform(step), step=step)[0])

    def __call__(self, logits: Array, step: int | None = None) -> Array:
        step = self._next_step if step is None else step
        self._next_step = step + 1
        uniform = None
        if self.params.do_sample:
            uniform = self.uniform(step, logits.shape[0], array_module(logits))
        return sample(logits, self.params, uniform, step=step)


class Recorder(Sampler):
    """A Sampler for analysis loops: keeps every step's logits (float64 copies, `logits`) and, with `force`
    (token ids per step), returns those instead of its own pick (teacher forcing through the decode loop)."""

    def __init__(self, params: SamplingParams | None = None, force=None):
        super().__init__(params or SamplingParams())
        self.logits: list[np.ndarray] = []
        self.force = force

    def pick(self, row: np.ndarray, step: int) -> int:
        self.logits.append(np.array(row, np.float64))
        return int(self.force[step]) if self.force is not None else super().pick(row, step)
