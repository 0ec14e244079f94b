"""Philox4x32-10 (Salmon et al., SC'11; the Random123 reference): counter-based uniforms for seeded sampling,
by the same integer operations in numpy (uint64 products) and in CUDA C (a CuPy elementwise kernel), so a seed
gives bit-identical draws on the host and on the GPU.

What it is: `philox4x32` (the block function), `philox_uniform` (row r's float64 draw at a step, counter =
(step lo, step hi, r, 0), key = the seed's two 32-bit halves), and its CuPy twin. What it is not: the sampler
(`vlmdecode.sampling` uses these draws); CuPy is never imported here (the caller passes its module).
"""

from __future__ import annotations

import numpy as np

PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # round multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # key bumps (golden ratio, sqrt(3) - 1)
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32(counter, key) -> np.ndarray:
    """Philox4x32-10 of `counter` (4 uint32 rows [4, N], or 4 ints) under `key` (2 uint32) -> [4, N] uint32."""
    c = [np.asarray(x, dtype=np.uint64).reshape(-1) for x in counter]
    k0, k1 = (np.uint64(int(x) & 0xFFFFFFFF) for x in key)
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(PHILOX_W[0])) & _MASK32, (k1 + np.uint64(PHILOX_W[1])) & _MASK32
        p0, p1 = m0 * c[0], m1 * c[2]  # < 2**64: exact in uint64
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & _MASK32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & _MASK32]
    return np.stack(c).astype(np.uint32)


def _seed_key(seed: int) -> tuple[int, int]:
    return seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF


def philox_uniform(seed: int, step: int, n: int = 1) -> np.ndarray:
    """[n] float64 in [0, 1): row r's draw at `step` for `seed` (counter = (step lo, step hi, r, 0))."""
    rows = np.arange(n, dtype=np.uint64)
    zero = np.zeros(n, np.uint64)
    x = philox4x32([zero + (step & 0xFFFFFFFF), zero + (step >> 32), rows, zero], _seed_key(seed)).astype(np.float64)
    return ((x[0] // 32) * 67108864.0 + x[1] // 64) / 9007199254740992.0  # (x0 >> 5) * 2**26 + (x1 >> 6), / 2**53


# The CuPy side: one thread per row, the same operations as philox4x32 + philox_uniform.
PHILOX_SOURCE = r"""
unsigned int c0 = (unsigned int)(step & 0xffffffffULL), c1 = (unsigned int)(step >> 32), c2 = (unsigned int)i, c3 = 0;
unsigned int key0 = k0, key1 = k1;
for (int r = 0; r < 10; ++r) {
    if (r) { key0 += 0x9E3779B9u; key1 += 0xBB67AE85u; }
    unsigned long long p0 = (unsigned long long)0xD2511F53u * c0, p1 = (unsigned long long)0xCD9E8D57u * c2;
    unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ key0, n2 = (unsigned int)(p0 >> 32) ^ c3 ^ key1;
    c1 = (unsigned int)p1; c3 = (unsigned int)p0; c0 = n0; c2 = n2;
}
u = ((double)(c0 >> 5) * 67108864.0 + (double)(c1 >> 6)) / 9007199254740992.0;
"""
_cupy_philox = None


def philox_uniform_cupy(xp, seed: int, step: int, n: int):
    """philox_uniform on the GPU: [n] float64 in `xp` (cupy), queued on the current stream."""
    global _cupy_philox
    if _cupy_philox is None:
        _cupy_philox = xp.ElementwiseKernel("uint32 k0, uint32 k1, uint64 step", "float64 u", PHILOX_SOURCE,
                                            "vlmdecode_philox_uniform")
    k0, k1 = _seed_key(seed)
    out = xp.empty(n, xp.float64)
    _cupy_philox(np.uint32(k0), np.uint32(k1), np.uint64(step), out)  # async on the current stream
    return out
