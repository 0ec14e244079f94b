"""The bounded LM head of the native greedy step: the same token as the full head, reading half its bytes.

A greedy step needs only the argmax of the head's fp16 logits, not the logits. Two passes find it exactly:

    head_bound   the int8 copy Q (one scale s_r a row) streamed in full against x rounded to 16 bits
                 (X = rint(x / s_x), s_x = max|x| / 32639, two int8 planes: DP4A, exact int32 sums):
                 a_r = s_r s_x (q_r . X), and a bound |z_r - a_r| <= E_r = c_r ||x|| + d_r ||x - s_x X|| on the full
                 head's fp32 dot z_r (c_r, d_r below) -> upper[r] = a_r + E_r, and each block's largest lower bound
                 a_r - E_r over the ids not suppressed
    head_pick    T = the largest lower bound; only the rows with g(upper[r]) >= g(T) - |g(T)| / 256 - 1e-6 (g: the
                 softcap; NaN bounds included) are computed exactly, as the full head computes them (same bits),
                 rounded to fp16 and picked as it picks (max, then the first index; NaN/+inf reported)

Why it is exact: the row r* with the largest lower bound has z_r* >= T. Any row left out has z_r <= upper[r], so its
softcapped logit lies more than |g(T)| / 256 (four fp16 ulps at g(T)'s magnitude, or 1e-6 near zero: more than the
fp32 tanh's error) below r*'s, and rounding to fp16 keeps it strictly below: it can neither win nor tie. The bound
(Cauchy-Schwarz twice): z_r - s_r s_x q_r.X = (W_r - s_r q_r).x + s_r q_r.(x - s_x X), so with eps_r = ||W_r - s_r q_r||
(float64 at set-up), n_r = ||W_r|| and d_r = n_r + eps_r >= ||s_r q_r||, |.| <= eps_r ||x|| + d_r ||x - s_x X||; the
fp32 rounding of the full head's dot (any summation order) and of the estimate's last multiplies adds
<= gamma (n_r + d_r)(||x|| + ||x - s_x X||), gamma = 3 k 2^-24 + 2^-20. So c_r = eps_r + gamma (n_r + d_r) and
d_r (1 + gamma), rounded up to fp32; the kernel takes both norms x 1.001 (+ 2^-20 ||x|| for the residual's rounding).
Non-finite weights give NaN bounds: those rows are always computed exactly, so a NaN/+inf logit is still reported.

How much it reads: the int8 copy (half the fp16 head) + 16 bytes a row + 4 bytes of bounds a row, written and read,
+ the candidates' fp16 rows (the bound is ~0.3 standard deviations of the logits over the vocabulary at gemma3-1b's
shape with random weights, which leaves 1 to a few dozen rows: bounded_head_bits_cpu.json, h200_bounded_head.json;
how many a trained head leaves depends on its logits' spread near the top, not measured here). bits=6 (`pack6`):
q in [-31, 31], 3/4 of the int8 bytes, the bound ~4x wider and more candidates. The fp16 head stays: the body graph
(host-fed steps, sampling, the plain loop that reads logits per token) and the prefill use it; the copy is extra
device memory (vocab x hidden bytes at 8 bits).

What it is: the set-up (quantise), a numpy reference of both passes (CI checks the selection against
the full argmax) and the launches. Not here: the kernels' code (`native.cuda_src.head_bound`), when the decoder uses
which head (`native.decoder`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kernels import HEAD_MAX_BLOCKS, KernelShapeError, Launch, _need_shared, head_blocks, pack

# head_bound's (rows a warp, PF, MINB): 4 x 1152 int8 bytes in flight a warp at gemma3-1b's width; MINB 0 leaves the
# registers to ptxas (128 there: 2 blocks an SM; MINB 1 lets it take 155, one block an SM)
BOUND = (4, 0, 0)
PICK_ROWS = 256  # rows a head_pick block scans (<= HEAD_MAX_BLOCKS blocks)
X_NORM_UP = 1.001  # the kernel's factor on its fp32 ||x||_2


def gamma(k: int) -> float:
    """The fp32 rounding allowance per unit of ||W_r|| ||x|| of a k-long dot product (both passes, any order)."""
    return 3.0 * k * 2.0 ** -24 + 2.0 ** -20


BITS = (8, 6)  # the copy's widths: 8 (the default), 6 (nibble + crumb planes, `pack6`; not yet measured on a GPU)


def check_width(k_len: int, bits: int = 8) -> None:
    if bits not in BITS:
        raise KernelShapeError(f"the bounded LM head's copy has {BITS} bits a weight, not {bits}")
    unit = 16 if bits == 8 else 64
    if k_len % unit or k_len <= 0:
        raise KernelShapeError(f"the bounded LM head at {bits} bits reads {unit} weights a lane at a time: hidden size "
                               f"{k_len} is not a multiple of {unit} (use head='full')")


def pack6(q, xp=np):
    """q [V, k] int8 in [-31, 31] -> [V, 3k / 4] bytes (as int8): u = q + 32, k / 2 nibble bytes (8 columns a 4-byte
    word: byte b holds column b in its low and 4 + b in its high nibble) then k / 4 crumb bytes (16 columns a word:
    byte b, bit pair j holds the top two bits of column 4 j + b); head_bound<.., 6>'s unpack6 reads them back."""
    V, k = int(q.shape[0]), int(q.shape[1])
    u = (q.astype(xp.int16) + 32).astype(xp.uint8)
    lo, hi = u & 15, u >> 4
    g8 = lo.reshape(V, k // 8, 2, 4)  # [.., word, half (columns 0-3 / 4-7), byte]
    nib = (g8[:, :, 0, :] | (g8[:, :, 1, :] << 4)).reshape(V, k // 2)
    g16 = hi.reshape(V, k // 16, 4, 4)  # [.., word, j (4-column group), byte]
    crumb = (g16[:, :, 0, :] | (g16[:, :, 1, :] << 2) | (g16[:, :, 2, :] << 4) | (g16[:, :, 3, :] << 6))
    return xp.concatenate([nib, crumb.reshape(V, k // 4)], axis=1).view(xp.int8)


def unpack6(packed, k: int) -> np.ndarray:
    """pack6's inverse in numpy: [V, 3k / 4] -> q [V, k] int8."""
    p = np.asarray(packed).view(np.uint8)
    V = p.shape[0]
    nib, crumb = p[:, : k // 2].reshape(V, k // 8, 1, 4), p[:, k // 2:].reshape(V, k // 16, 1, 4)
    lo = np.concatenate([nib & 15, nib >> 4], axis=2).reshape(V, k)
    hi = np.concatenate([(crumb >> (2 * j)) & 3 for j in range(4)], axis=2).reshape(V, k)
    return ((hi.astype(np.int16) << 4 | lo) - 32).astype(np.int8)


@dataclass
class BoundTable:
    """The head's copy Q and (s_r, c_r, d_r, 0) [V, 4] float32, on the array module of W (numpy or CuPy). bits 8:
    Q [V, k] int8; 6: Q [V, 3k / 4], `pack6`'s planes."""

    q: object
    sc: object
    bits: int = 8

    @property
    def nbytes(self) -> int:
        return int(self.q.nbytes + self.sc.nbytes)


def quantise(W, k_len: int | None = None, rows_per_chunk: int = 4096, bits: int = 8) -> BoundTable:
    """W [V, ld] fp16 rows (the head's `rows_layout`; the first k_len columns used) -> its BoundTable. Row r:
    s_r = max|W_r| / qmax, q = rint(W_r / s_r) in [-qmax, qmax] (qmax 127 at 8 bits, 31 at 6), c_r and d_r as the
    module docstring says, in float64 and rounded up to float32. Chunked over rows: float64 temporaries of
    rows_per_chunk rows (a few of 38 MB at gemma3-1b's width), which CuPy's pool keeps for later allocations."""
    xp = _xp(W)
    V, k = int(W.shape[0]), int(W.shape[1] if k_len is None else k_len)
    check_width(k, bits)
    q = xp.empty((V, k if bits == 8 else 3 * k // 4), xp.int8)
    sc = xp.zeros((V, 4), xp.float32)
    for r0 in range(0, V, rows_per_chunk):
        qi, sc[r0: r0 + rows_per_chunk, :3] = row_bounds(W[r0: r0 + rows_per_chunk, :k], 2 ** (bits - 1) - 1)
        q[r0: r0 + rows_per_chunk] = qi if bits == 8 else pack6(qi, xp)
    return BoundTable(q, sc, bits)


def row_bounds(W, qmax: int):
    """Rows W [n, k] (fp16) -> (q [n, k] int8 in [-qmax, qmax], [n, 3] float32 (s_r, c_r, d_r)): the scale, and the
    bound's coefficients of the module docstring computed in float64 and rounded up (any qmax <= 127)."""
    xp = _xp(W)
    g = gamma(int(W.shape[1]))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        w = W.astype(xp.float64)
        s = (xp.abs(w).max(axis=1) / qmax).astype(xp.float32)  # the fp32 scale the kernel multiplies by
        s64 = s.astype(xp.float64)[:, None]
        qi = xp.clip(xp.rint(w / xp.where(s64 == 0, 1.0, s64)), -qmax, qmax)
        qi = xp.where(xp.isfinite(qi), qi, 0)
        err = xp.sqrt(((w - s64 * qi) ** 2).sum(axis=1))
        n = xp.sqrt((w * w).sum(axis=1))
        d = n + err
        return qi.astype(xp.int8), xp.stack([s, _up(xp, err + g * (n + d)), _up(xp, d * (1 + g))], axis=1)


def _up(xp, v):
    """float64 -> the float32 at or above it."""
    v32 = v.astype(xp.float32)
    return xp.where(v32.astype(xp.float64) < v, xp.nextafter(v32, xp.float32(np.inf)), v32)


def _xp(a):
    return np if isinstance(a, np.ndarray) else __import__("cupy")


def _cap(z, softcap: float | None):
    return np.float32(softcap) * np.tanh(z / np.float32(softcap)) if softcap else z


def _fp16_pick(v: np.ndarray, rows: np.ndarray) -> tuple[int, float]:
    """The full head's rule over fp16 logits v[rows] (rows ascending): -1 for a NaN/+inf among them, else the first
    index of the max (-1 when rows is empty or every logit is -inf, as `advance` reports)."""
    vals = v[rows].astype(np.float32)
    if len(rows) == 0 or np.isnan(vals).any() or np.isposinf(vals).any() or (vals == -np.inf).all():
        return -1, float("nan")
    j = int(np.argmax(vals))
    return int(rows[j]), float(vals[j])


def candidates(upper, t, softcap: float | None = None):
    """head_pick's rule: the rows whose softcapped upper bound is not below g(t) - |g(t)| / 256 - 1e-6 (t: the
    largest lower bound; NaN bounds included). numpy or CuPy arrays."""
    with np.errstate(invalid="ignore", over="ignore"):
        gt = _cap(np.float32(t), softcap)
        return ~(_cap(upper, softcap) < gt - (np.abs(gt) * np.float32(1 / 256) + np.float32(1e-6)))


def _kept(n: int, suppress) -> np.ndarray:
    keep = np.ones(n, bool)
    keep[list(suppress)] = False
    return keep


def _fp16_logits(W: np.ndarray, x: np.ndarray, softcap: float | None) -> np.ndarray:
    """The full head's fp16 logits in numpy (fp32 dots, not its summation order)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _cap(W[:, : len(x)].astype(np.float32) @ np.asarray(x, np.float32), softcap).astype(np.float16)


def reference_pick(table: BoundTable, W: np.ndarray, x: np.ndarray, softcap: float | None = None,
                   suppress=()) -> tuple[int, int]:
    """Both passes in numpy (fp32 like the kernels, not their summation order): (token, candidates computed
    exactly). The full head's logits are computed for every row here (a reference, not a saving); the token is
    picked among the candidates only."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        a, e = estimate(table, x)
        keep = _kept(len(a), suppress)
        lows = (a - e)[keep]
        lows = lows[~np.isnan(lows)]
        cand = candidates(a + e, lows.max() if len(lows) else -np.inf, softcap) & keep
    return _fp16_pick(_fp16_logits(W, x, softcap), np.flatnonzero(cand))[0], int(cand.sum())


def estimate(table: BoundTable, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """head_bound's (a_r, E_r) for every row in numpy (float32 as the kernel, exact integer sums)."""
    x = np.asarray(x, np.float32)
    mx = np.float32(np.abs(x).max())
    s_x = mx / np.float32(32639) if mx > 0 else np.float32(1)
    X = np.clip(np.rint(x * (np.float32(1) / s_x)), -32639, 32639).astype(np.int64)
    hi = (X + 128) >> 8  # the kernel's two int8 planes (cast as it casts: a value out of range would wrap)
    q = (table.q if table.bits == 8 else unpack6(table.q, len(x))).astype(np.int64)  # 6 bits: through the packing
    S = 256 * (q @ hi.astype(np.int8).astype(np.int64)) + q @ (X - 256 * hi).astype(np.int8).astype(np.int64)
    xn = np.float32(np.sqrt(np.float32(x @ x)) * X_NORM_UP)
    r = x - s_x * X.astype(np.float32)
    dl = np.float32(np.sqrt(np.float32(r @ r)) * X_NORM_UP + 2.0 ** -20 * xn)
    a = table.sc[:, 0] * (s_x * S.astype(np.float32))
    return a, table.sc[:, 1] * xn + table.sc[:, 2] * dl


def full_pick(W: np.ndarray, x: np.ndarray, softcap: float | None = None, suppress=()) -> int:
    """The full head's token in numpy (the rule of gemv's EPI_HEAD and `advance`)."""
    return _fp16_pick(_fp16_logits(W, x, softcap), np.flatnonzero(_kept(W.shape[0], suppress)))[0]


# ---- launches (CuPy) -----------------------------------------------------------------------------------------------
def bound_name(flat8: bool, nq: int, shape: tuple = BOUND, bits: int = 8) -> str:
    return f"head_bound<{'true' if flat8 else 'false'},{nq},{shape[0]},{shape[1]},{shape[2]},{bits}>"


def pick_name(nv: int) -> str:
    return f"head_pick<{nv}>"


def names(k_len: int, head_nv: int, shape: tuple = BOUND, bits: int = 8) -> tuple[str, str]:
    """(head_bound, head_pick) instances for a head of reduction k_len read with head_nv fp16 loads a lane: the
    fold's FLAT8 as gemv<head_nv, .., EPI_HEAD>'s (form_vector<NV >= 5>), so the vector has the same bits. NQ: the
    chunks a lane takes (16 columns a chunk at 8 bits, 64 at 6)."""
    nq = -(-k_len // (32 * (16 if bits == 8 else 64)))
    return bound_name(head_nv >= 5, nq, shape, bits), pick_name(head_nv)


def launches(fns, table: BoundTable, W, vocab: int, k_len: int, head_nv: int, threads: int, *, src, delta,
             delta_parts: int, delta_w, norm_w, eps: float, softcap: float | None, xvec, upper, low, part_v, part_i,
             suppress, n_suppress, shape: tuple = BOUND) -> tuple[Launch, Launch]:
    """The two launches of a bounded head over `table` (its set-up from W, the fp16 head [V, ld]) with the full
    head's fold arguments and block size (threads: the full head's, so form_vector runs the same reductions).
    Buffers: xvec [k_len], upper [V], low [HEAD_MAX_BLOCKS] float32; part_v/part_i as the full head's. shape:
    head_bound's (rows a warp, PF, MINB), as compiled (`names`)."""
    nb, pn = names(k_len, head_nv, shape, table.bits)
    fb, fp = fns[nb], fns[pn]
    shared = _need_shared(fb, 6 * k_len)  # x in fp32 and its two int8 planes
    _need_shared(fp, 4 * k_len)
    per_group = (threads // 32) * shape[0]
    grid_b = head_blocks(fb, threads, -(-vocab // per_group), shared)
    if int(low.size) < grid_b:
        raise KernelShapeError(f"head_bound: {int(low.size)} block maxima for a grid of {grid_b}")
    args, held = pack(table.q, table.sc, np.int32(vocab), np.int32(k_len), src, delta, np.int32(delta_parts), delta_w,
                      norm_w, np.float32(eps), xvec, upper, low, suppress, n_suppress)
    bound = Launch("head_bound", fb, (grid_b, 1, 1), (threads, 1, 1), args, shared,
                   table.nbytes + 4 * k_len + 4 * vocab, held=held)
    grid_p = int(min(HEAD_MAX_BLOCKS, -(-vocab // PICK_ROWS)))
    args, held = pack(W, np.int32(vocab), np.int32(int(W.shape[1])), np.int32(k_len), xvec, upper, low,
                      np.int32(grid_b), np.float32(softcap or 0.0), part_v, part_i, suppress, n_suppress)
    pick = Launch("head_pick", fp, (grid_p, 1, 1), (threads, 1, 1), args, 4 * k_len,
                  4 * vocab + 4 * grid_b + 4 * k_len, held=held)
    return bound, pick
