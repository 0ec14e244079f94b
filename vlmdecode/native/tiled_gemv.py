"""The step's GEMVs over their weights re-laid in tiles: the layouts, their inverses and the `gemv_tiled` launches.

The step's gemv gives a warp whole rows and sums each row across the warp with a 5-step shuffle chain before it
loads its next rows. Here a lane owns a row:

    tile t      R rows: gate rows t R/2 .. t R/2 + R/2 - 1, then their up rows (so one tile gives R/2 outputs)
    lane l      row l % R of the tile, sub-lane l / R of S = 32 / R
    chunk group cg: 8-half chunk cg S + l / R of lane l's row, for all 32 lanes: 512 contiguous bytes
    W_t         [n_tiles][CG = k / 8S][32][8] halves

A block takes a tile at a time, its warps the chunk groups i NW + w, each lane one fp32 sum; the sub-lanes and the
warps are summed once a tile. down (EPI_PLAIN, split-K): each slice of the reduction is tiled on its own,

    W_t         [splits][n_tiles = n / R][CG = k / 8S][32][8] halves, tile t: rows t R .. t R + R - 1

and o (EPI_PLAIN) and qkv (EPI_FOLD: with gate|up's fold) as one slice.

Measured first outside the decoder (`scripts/h200_tiled_gemv_probe.py`,
data/results/h200_tiled_gemv_probe_88ba30d.json), where it read gemma3-1b's gate|up and down faster than the step's
gemv.

What it is not: the kernel (`native.cuda_src.gemv_tiled`), or the choice to use it (`Shapes.gate_up_tiled`,
`down_tiled`, `o_tiled`, `qkv_tiled`, `native.decoder`). The tiled copies are extra device memory beside the
row-major weights, which the native prefill's GEMMs read.
"""

from __future__ import annotations

import numpy as np

from .kernels import EPI_FOLD, EPI_GELU, EPI_PLAIN, KernelShapeError, Launch, _need_shared, pack, resident_blocks


def _check_block(R: int, warps: int) -> None:
    """R rows a tile (a divisor of 32, >= 2: even, as 32's divisors past 1 are) and 1 to 32 warps a block."""
    if R < 2 or R > 32 or 32 % R:
        raise KernelShapeError(f"gemv_tiled: a tile's rows must be an even divisor of 32 (2-32), got {R}")
    if not 1 <= warps <= 32:
        raise KernelShapeError(f"gemv_tiled: 1 to 32 warps a block, got {warps}")


def fold_slots(warps: int, epi: int = EPI_GELU) -> int:
    """The float4 slots a thread of gemv_tiled's fold holds (its FR): EPI_FOLD from 16 warps 1, else 2."""
    return 1 if epi == EPI_FOLD and warps >= 16 else 2


def _check_fold(k_len: int, warps: int, epi: int = EPI_GELU) -> None:
    """A fold that fits its slots: k_len / 4 float4s over FR slots of 32 x warps threads."""
    per = 4 * fold_slots(warps, epi)
    if k_len > per * 32 * warps:
        need = next((w for w in range(1, 33) if k_len <= 4 * fold_slots(w, epi) * 32 * w), None)
        raise KernelShapeError(f"gemv_tiled: its fold holds {per} elements a thread at {warps} warps, so a row of "
                               f"{k_len} needs " + (f">= {need} warps" if need else "more than a block of 32 warps"))


def check(n_rows: int, k_len: int, R: int, warps: int) -> None:
    """Refuse what gemv_tiled's gate|up cannot run: the tile and block (`_check_block`), whole tiles of gate|up
    pairs, whole chunk groups, and a fold that fits its slots (`_check_fold`)."""
    _check_block(R, warps)
    S = 32 // R
    if n_rows % (R // 2) or k_len % (8 * S):
        raise KernelShapeError(f"gemv_tiled: {n_rows} gate|up pairs of rows of {k_len} do not tile by R = {R}: the "
                               f"pairs must be a multiple of {R // 2} and the row a multiple of {8 * S}; give "
                               f"Shapes.gate_up_tiled another R or () for the row-major gemv")
    _check_fold(k_len, warps)


def check_slices(n_rows: int, k_len: int, R: int, warps: int) -> None:
    """Refuse what gemv_tiled's plain slices (down's split-K, o's and qkv's one) cannot run: the tile and block
    (`_check_block`), whole tiles and whole chunk groups of a slice of k_len."""
    _check_block(R, warps)
    if n_rows % R or k_len % (8 * (32 // R)):
        raise KernelShapeError(f"gemv_tiled: {n_rows} rows with slices of {k_len} do not tile by R = {R}: the rows "
                               f"must be a multiple of {R} and a slice a multiple of {8 * (32 // R)}; give "
                               f"Shapes.down_tiled / o_tiled / qkv_tiled another R or () for the row-major gemv")


def check_fold_rows(n_rows: int, k_len: int, R: int, warps: int) -> None:
    """Refuse what gemv_tiled EPI_FOLD (qkv: plain rows over one slice, the fold before them) cannot run: the plain
    slice's tiles (`check_slices`) and a fold of k_len that fits its slots (`_check_fold`)."""
    check_slices(n_rows, k_len, R, warps)
    _check_fold(k_len, warps, EPI_FOLD)


def layout_slices(w_rows: np.ndarray, R: int, splits: int) -> np.ndarray:
    """Rows [n, K] in split-K slices of K / splits -> W_t [splits][n / R][k / 8S][32][8], k = K / splits."""
    n, K = w_rows.shape
    if K % splits:
        raise KernelShapeError(f"gemv_tiled: {splits} slices do not cover rows of {K}")
    k, S = K // splits, 32 // R
    check_slices(n, k, R, 1)
    # [t, r, p, cg, s, e] -> [p, t, cg, s, r, e]: lane s R + r of chunk group cg holds row t R + r's chunk cg S + s
    t = w_rows.reshape(n // R, R, splits, k // (8 * S), S, 8).transpose(2, 0, 3, 4, 1, 5)
    return np.ascontiguousarray(t).reshape(splits, n // R, k // (8 * S), 32, 8)


def rows_slices(w_t: np.ndarray, R: int) -> np.ndarray:
    """`layout_slices`' inverse: W_t -> the rows [n, K]."""
    splits, n_tiles, cg = w_t.shape[:3]
    S = 32 // R
    t = w_t.reshape(splits, n_tiles, cg, S, R, 8).transpose(1, 4, 0, 2, 3, 5)
    return t.reshape(n_tiles * R, splits * cg * S * 8)


def layout(w_rows: np.ndarray, R: int) -> np.ndarray:
    """gate|up's rows [2 n, k] (gate rows, then up rows: `kernels.rows_layout`) -> W_t [n / (R/2)][k / 8S][32][8]."""
    rows2, k = w_rows.shape
    n, P = rows2 // 2, R // 2
    check(n, k, R, -(-k // 256))
    # rows in tile order (tile t: gate rows t P .. t P + P - 1, then their up rows), laid out as one slice
    tiles = np.concatenate([w_rows[:n].reshape(n // P, P, k), w_rows[n:].reshape(n // P, P, k)], axis=1)
    return layout_slices(tiles.reshape(2 * n, k), R, 1)[0]


def rows(w_t: np.ndarray, R: int) -> np.ndarray:
    """`layout`'s inverse: W_t -> gate|up's rows [2 n, k]."""
    n_tiles, P = w_t.shape[0], R // 2
    tiles = rows_slices(w_t[None], R).reshape(n_tiles, R, -1)  # rows in tile order
    k = tiles.shape[-1]
    return np.concatenate([tiles[:, :P].reshape(-1, k), tiles[:, P:].reshape(-1, k)])


def chunks_per_warp(k_len: int, R: int, warps: int) -> int:
    """CPW: the chunk groups each warp of a block takes from a tile."""
    return -(-(k_len // (8 * (32 // R))) // warps)


def name(k_len: int, R: int, warps: int, mb: int, epi: int = EPI_GELU) -> str:
    """gemv_tiled<CPW, R, NW, MB, EPI> (EPI_GELU: gate|up, EPI_FOLD: qkv, EPI_PLAIN: down's or o's slices)."""
    return f"gemv_tiled<{chunks_per_warp(k_len, R, warps)},{R},{warps},{mb},{epi}>"


def launch(fns, label: str, w_t, n_rows: int, k_len: int, *, y, src, x_in=None, x_scale: float = 1.0, delta=None,
           delta_parts: int = 1, delta_w=None, resid_out, norm_w, eps: float, R: int, warps: int = 8,
           mb: int = 0, epi: int = EPI_GELU) -> Launch:
    """A folding launch with gemv's fold arguments: EPI_GELU gate|up over W_t (`layout`, n_rows pairs), EPI_FOLD
    n_rows plain rows (qkv) over a one-slice W_t (`layout_slices`); the grid: every block the GPU holds at once, at
    most one a tile."""
    if epi == EPI_GELU:
        check(n_rows, k_len, R, warps)
        total, n_tiles, what = 2 * n_rows, n_rows // (R // 2), f"gate|up of {n_rows} pairs"
    elif epi == EPI_FOLD:
        check_fold_rows(n_rows, k_len, R, warps)
        total, n_tiles, what = n_rows, n_rows // R, f"copy of {n_rows} rows"
    else:
        raise KernelShapeError(f"{label}: gemv_tiled folds with EPI_GELU ({EPI_GELU}) or EPI_FOLD ({EPI_FOLD}), "
                               f"got {epi}: plain slices take launch_slices")
    if norm_w is None:
        raise KernelShapeError(f"{label}: a folding gemv_tiled launch forms its input vector: give norm_w")
    want = total * k_len * 2
    if int(w_t.nbytes) != want:
        raise KernelShapeError(f"{label}: a tiled {what} x {k_len} holds {want} bytes, got {int(w_t.nbytes)}")
    fn = fns[name(k_len, R, warps, mb, epi)]
    shared = _need_shared(fn, 4 * k_len)
    grid = min(n_tiles, resident_blocks(fn, warps * 32, shared))
    args, held = pack(w_t, np.int32(n_rows), np.int32(k_len), np.int32(k_len), src, x_in, np.float32(x_scale), delta,
                      np.int32(delta_parts), delta_w, resid_out, norm_w, np.float32(eps), y, None, np.float32(0.0),
                      None, None, None, None)
    return Launch(label, fn, (grid, 1, 1), (warps * 32, 1, 1), args, shared, want + 4 * k_len + 4 * n_rows,
                  held=held)


def launch_slices(fns, label: str, w_t, n_rows: int, k_len: int, splits: int, *, y, src, R: int, warps: int = 8,
                  mb: int = 0) -> Launch:
    """A plain GEMV's launch over W_t (`layout_slices`; down: split-K, o: one slice): y [splits, n_rows] the
    slices' partial sums of src's slices; the grid: every block the GPU holds at once over the slices, at most one
    a tile a slice."""
    check_slices(n_rows, k_len, R, warps)
    want = splits * n_rows * k_len * 2
    if int(w_t.nbytes) != want:
        raise KernelShapeError(f"{label}: a tiled copy of {n_rows} rows x {splits} slices of {k_len} holds {want} "
                               f"bytes, got {int(w_t.nbytes)}")
    fn = fns[name(k_len, R, warps, mb, EPI_PLAIN)]
    shared = _need_shared(fn, 4 * k_len)
    grid = min(n_rows // R, -(-resident_blocks(fn, warps * 32, shared) // splits))
    args, held = pack(w_t, np.int32(n_rows), np.int32(k_len), np.int32(k_len), src, None, np.float32(1.0), None,
                      np.int32(1), None, None, None, np.float32(0.0), y, None, np.float32(0.0), None, None, None, None)
    return Launch(label, fn, (grid, splits, 1), (warps * 32, 1, 1), args, shared,
                  want + 4 * splits * k_len + 4 * splits * n_rows, held=held)
