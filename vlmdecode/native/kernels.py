"""The native decoder's kernels from Python: weight layout, launch geometry and one `Launch` per kernel call.

What it is: the host side of `native.kernels_src` -- it compiles the CUDA source once per process and
shape set (CuPy RawModule, NVRTC), lays weights out as the kernels read them ([out, in] rows, contiguous
along the reduction), picks grids that fill the GPU, and packs each call's arguments ONCE into a `Launch`
whose pointers never change (so a stream of launches can be captured into a CUDA graph and replayed).
What it is not: the order of a decode step or any model logic (`native.decoder`), nor the block shapes a step
chooses (`native.shapes`). The layout and geometry helpers are plain numpy and run without a GPU; everything else
needs CuPy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .kernels_src import SOURCE

EPI_PLAIN, EPI_GELU, EPI_HEAD = 0, 1, 2
EPI_FOLD = 3  # gemv_tiled only: plain rows over the folded vector (qkv; gemv's EPI_PLAIN folds when given norm_w)
STEP_GEMVS = {"qkv": EPI_PLAIN, "o": EPI_PLAIN, "gate_up": EPI_GELU, "down": EPI_PLAIN, "head": EPI_HEAD}  # epilogues
HEAD_MAX_BLOCKS = 1024  # one argmax partial per block; `advance` reduces them in one 1024-thread block
ATTN_CHUNK = 16  # keys per attention block: ~t/16 blocks per KV head at position t
ATTN_THREADS = 256
SLICE_TARGET = 864  # split-K: largest reduction slice one block streams per row (gemma3-1b down: 8 x 864)
FOLD_R = 3  # float4 slots a thread of the fold (cuda_src.common FOLD_R)
NV_MAX = 8  # 16-byte loads per lane per row: reductions up to 8 * 256 = 2048 elements in one slice


class KernelShapeError(ValueError):
    """A shape the native kernels do not handle (the message says which and what is accepted)."""


def rows_layout(w_in_out: np.ndarray) -> np.ndarray:
    """A weight in the x @ W layout [in, out] -> [out, in] rows, C-contiguous (what the GEMVs stream)."""
    if w_in_out.ndim != 2:
        raise KernelShapeError(f"a GEMV weight must be 2-D [in, out], got shape {w_in_out.shape}")
    if w_in_out.shape[0] % 8:
        raise KernelShapeError(f"a GEMV's reduction length must be a multiple of 8 (16-byte rows), "
                               f"got {w_in_out.shape[0]}")
    return np.ascontiguousarray(w_in_out.T)


def split_fold_max(warps: int) -> int:
    """The longest row gemv_split's fold takes: FOLD_R float4s a thread of half the block's warps."""
    return 4 * FOLD_R * 16 * int(warps)


def loads_per_lane(k_len: int) -> int:
    """NV: 16-byte loads per lane to cover a k_len-element row slice with one warp."""
    nv = -(-k_len // 256)
    if k_len % 8 or nv > NV_MAX:
        raise KernelShapeError(f"a GEMV slice must be a multiple of 8 and <= {NV_MAX * 256} elements, got {k_len}")
    return nv


def split_k(k: int, target: int = SLICE_TARGET) -> int:
    """Fewest slices s (s divides k / 8) with k / s <= target: the split-K of a long reduction."""
    if k % 8:
        raise KernelShapeError(f"a reduction length must be a multiple of 8, got {k}")
    units = k // 8
    for s in range(1, units + 1):
        if units % s == 0 and k // s <= target:
            return s
    raise KernelShapeError(f"no split of {k} into slices <= {target}")  # unreachable for target >= 8


def attention_layout(head_dim: int) -> tuple[int, int]:
    """(uint4 loads per lane per key, lanes per key) of attention<HD>; refuses head dims it cannot map."""
    vpl = head_dim // 256 if head_dim >= 256 else 1
    lpk = head_dim // (8 * vpl)
    if head_dim % 8 or (head_dim >= 256 and head_dim % 256) or lpk & (lpk - 1) or not 1 <= lpk <= 32:
        raise KernelShapeError(f"head_dim {head_dim}: the attention kernel takes 8 * 2^k (<= 256) or a multiple of 256")
    return vpl, lpk


def attention_splits(capacity: int, window: int | None, chunk: int = ATTN_CHUNK) -> int:
    """Blocks per KV head of a layer's attention grid: enough chunks for the most keys it can see."""
    keys = capacity if window is None else min(capacity, window)
    return -(-keys // chunk)


def split_units(head_dim: int, threads: int) -> int:
    """Sub-groups of lanes (one key row each at a time) in a block of attention_cl."""
    return (threads // 32) * (32 // attention_layout(head_dim)[1])


def cluster_splits(capacity: int, window: int | None, head_dim: int, threads: int, batch: int, cluster: int,
                   clusters: int = 0) -> int:
    """Blocks a KV head of attention_cl: `clusters` clusters of `cluster` blocks, or (0) the fewest with which
    every sub-group holds at most one batch of the most keys the layer can see."""
    if cluster not in (1, 2, 4, 8, 16) or batch not in (1, 2, 4, 8, 16):
        raise KernelShapeError(f"attention_cl: a cluster of 1, 2, 4, 8 or 16 blocks and a batch of 1-16 keys (a "
                               f"power of two), got {cluster} and {batch}")
    if threads % 32 or not 32 <= threads <= 512:  # 16 warps: <= 128 registers a thread (launch bounds)
        raise KernelShapeError(f"attention_cl: 1 to 16 warps a block, got {threads} threads")
    if head_dim < 16:  # a lane's 8-dim slice would hold both rotary halves; the chunked kernel takes any head dim
        raise KernelShapeError(f"attention_cl takes head_dim >= 16, got {head_dim}; attn_batch=0 selects the chunked "
                               "attention kernel")
    if clusters <= 0:
        keys = capacity if window is None else min(capacity, window)
        clusters = -(-keys // (cluster * split_units(head_dim, threads) * batch))
    return cluster * clusters


def gemv_name(nv: int, rpw: int, epi: int, pf: int = 1) -> str:
    """gemv<NV,RPW,EPI,PF>; PF 1: the first rows' weights are loaded before the input vector is formed; PF 2: that,
    and each next row group's weights are loaded while the current one is reduced (two register buffers); PF 3
    (gate|up): the second half of the warps loads its first rows before the wait while the first half forms the
    vector (`gemv_split<NV,RPW>`, `fold_half`)."""
    if int(pf) not in (0, 1, 2, 3) or (int(pf) == 3 and epi != EPI_GELU):
        raise KernelShapeError(f"GEMV weight prefetch must be 0, 1 or 2 (3: gate|up only), got {pf} for epilogue {epi}")
    if int(pf) == 3:
        return f"gemv_split<{nv},{rpw}>"
    return f"gemv<{nv},{rpw},{epi},{int(pf)}>"


def attention_name(head_dim: int) -> str:
    """attention<HD>: the chunked attention kernel."""
    return f"attention<{head_dim}>"


def cluster_name(head_dim: int, group: int, batch: int, cluster: int, warps: int) -> str:
    """attention_cl<HD, G, KB, C, NW>: G query heads a KV head, KB keys a batch, C blocks a cluster, NW warps a
    block."""
    return f"attention_cl<{head_dim},{group},{batch},{cluster},{warps}>"


_modules: dict = {}


def compile_module(gemvs, head_dims, clustered=(), extra=()):
    """One RawModule holding gemv<NV,RPW,EPI,PF> for every (nv, rpw, epi[, pf = 1]) in `gemvs`, attention<HD> for
    every head dim, attention_cl<HD,G,KB,C,NW> for every (hd, g, kb, c, nw) in `clustered`, the template instances
    named in `extra` (e.g. `bounded_head.names`) and `advance`; cached per process and name set."""
    import cupy

    names = tuple(sorted({gemv_name(*g) for g in gemvs} | {attention_name(h) for h in head_dims}
                         | {cluster_name(*c) for c in clustered} | set(extra)))
    key = (cupy.cuda.Device().id, names)
    if key not in _modules:  # templates by name expression; `advance` is extern "C" (its plain name)
        mod = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names or None)
        _modules[key] = {n: mod.get_function(n) for n in names + ("advance",)}
    return _modules[key]


def drop_module_cache() -> list:
    """Forget the compiled modules, ours and CuPy's memo of them (`cupy.clear_memo`: CuPy keeps one module per
    source, options and names), so that the next `compile_module` loads its module afresh (from CuPy's disk cache):
    the H200 A/B scripts give every variant's step a module of its own, loaded the same way. Returns the forgotten
    modules' functions: a module stays loaded while something holds them."""
    import cupy

    dropped = list(_modules.values())
    _modules.clear()
    cupy.clear_memo()
    return dropped


def ptr(a) -> np.uint64:
    """A kernel pointer argument: a CuPy array's address, or NULL for None."""
    return np.uint64(0 if a is None else a.data.ptr)


def pack(*values) -> tuple[tuple, tuple]:
    """A Launch's arguments from `values` (device arrays, None for NULL, NumPy scalars as given) and the arrays
    among them, which the Launch keeps referenced: its arguments are raw addresses, and an array the caller let go
    would otherwise be freed, and its memory reused, before the launch runs."""
    args, held = [], []
    for v in values:
        if v is None:
            args.append(np.uint64(0))
        elif hasattr(getattr(v, "data", None), "ptr"):  # a device array (CuPy's .data is a MemoryPointer)
            args.append(ptr(v))
            held.append(v)
        else:
            args.append(v)
    return tuple(args), tuple(held)


@dataclass
class Launch:
    """One kernel call with its arguments packed once (fixed pointers: capture-safe). pdl: launched with
    programmatic stream serialization (`native.pdl`), so it may start while the previous kernel finishes."""

    name: str
    fn: object
    grid: tuple
    block: tuple
    args: tuple
    shared: int
    nbytes: int  # device-memory bytes the call must move at least (weights, KV, vectors)
    pdl: bool = False
    _pdl: object = field(default=None, repr=False, compare=False)
    held: tuple = field(default=(), repr=False, compare=False)  # the arrays behind `args`' addresses (`pack`)

    def prepare(self) -> None:
        """Pack the PDL launch now (ctypes objects), not on the first call, which may be inside a capture."""
        if self.pdl and self._pdl is None:
            from .pdl import PdlLaunch

            self._pdl = PdlLaunch(self.fn, self.grid, self.block, self.args, self.shared, self.name)

    def __call__(self) -> None:
        if not self.pdl:
            self.fn(self.grid, self.block, self.args, shared_mem=self.shared)
            return
        self.prepare()
        self._pdl()


def capture(stream, enqueue):
    """A CUDA graph of what `enqueue()` launches on `stream` (CuPy stream capture). No garbage collection while
    capturing: a collected onnxruntime session (an earlier pipeline's) frees device memory, which is illegal
    during a capture and invalidates it."""
    import gc

    collect = gc.isenabled()
    gc.disable()
    try:
        with stream:
            stream.begin_capture()
            try:
                enqueue()
            finally:
                g = stream.end_capture()
    finally:
        if collect:
            gc.enable()
    return g


def _need_shared(fn, nbytes: int) -> int:
    if nbytes > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = nbytes
    return nbytes


def resident_blocks(fn, threads: int, shared: int) -> int:
    """Blocks of `threads` threads and `shared` dynamic bytes that the GPU holds at once (registers, threads
    and shared memory per SM permitting): a grid-stride GEMV's grid, so each block forms its vector once."""
    import cupy

    attrs = cupy.cuda.Device().attributes
    regs = -(-max(int(fn.num_regs), 1) // 8) * 8
    smem = attrs["MaxSharedMemoryPerMultiprocessor"] // max(1, shared + 1024 + int(fn.shared_size_bytes))
    per_sm = max(1, min(65536 // (regs * threads), 2048 // threads, 32, smem))
    return int(attrs["MultiProcessorCount"] * per_sm)


def head_blocks(fn, threads: int, n_groups: int, shared: int = 0) -> int:
    """The LM head's grid: every block resident at once, <= HEAD_MAX_BLOCKS (one argmax partial a block)."""
    return int(min(n_groups, HEAD_MAX_BLOCKS, resident_blocks(fn, threads, shared)))


def gemv(fns, name: str, W, n_rows: int, k_len: int, *, epi: int = EPI_PLAIN, splits: int = 1, y=None,
         src=None, x_in=None, x_scale: float = 1.0, delta=None, delta_parts: int = 1, delta_w=None,
         resid_out=None, norm_w=None, eps: float = 1e-6, logits=None, softcap: float | None = None,
         part_v=None, part_i=None, suppress=None, n_suppress=None, warps: int = 4, rpw: int = 2,
         resident_grid: bool = True, prefetch_weights: int = 1, max_blocks: int = 0) -> Launch:
    """A GEMV launch over W [rows, ld] fp16 (`rows_layout`). n_rows: output rows (GELU: gate rows, W holds
    gate then up); k_len: reduction slice (= ld / splits). Vector: fold (norm_w given) or plain (src).
    LM head: suppress [n] int64 ids the argmax skips, n_suppress [1] int32 how many (both device arrays, read
    at run time, so a captured graph follows new ids), or None.
    warps/rpw: block shape (`Shapes`); the module must hold gemv<NV, rpw, epi>. resident_grid: at most the
    blocks the GPU holds at once (each forms its vector once and strides over row groups), else one a group.
    prefetch_weights: the PF of gemv<..., PF> (`gemv_name`): 0, 1 (True) or 2. max_blocks > 0: at most that many
    blocks a split-K slice (the row groups stride over them), e.g. a grid whose blocks take the same number of groups;
    not for the LM head, whose grid is its argmax partials'."""
    ld = int(W.shape[1])
    if k_len * splits != ld:
        raise KernelShapeError(f"{name}: {splits} slices of {k_len} do not cover rows of {ld}")
    if norm_w is not None and splits != 1:
        raise KernelShapeError(f"{name}: a folded (normalised) input vector needs the whole row (splits=1)")
    nv = loads_per_lane(k_len)
    head = epi == EPI_HEAD
    if not 1 <= warps <= 8:
        raise KernelShapeError(f"{name}: 1 to 8 warps per block (the kernel's launch bound), got {warps}")
    if epi == EPI_GELU and rpw % 2:
        raise KernelShapeError(f"{name}: GELU rows come in (gate, up) pairs: rows per warp must be even, got {rpw}")
    if int(prefetch_weights) == 3 and (warps < 2 or warps % 2 or src is None or norm_w is None
                                       or k_len > split_fold_max(warps)):
        raise KernelShapeError(f"{name}: PF 3 folds over half the warps: an even warp count, a residual and a norm, "
                               f"and a row of at most {split_fold_max(warps)} elements (got {warps}, {k_len})")
    if max_blocks < 0 or (max_blocks and head):
        raise KernelShapeError(f"{name}: max_blocks caps a step GEMV's grid (> 0; 0: the resident grid), not the LM "
                               f"head's, got {max_blocks}")
    fn = fns[gemv_name(nv, rpw, epi, int(prefetch_weights))]
    per_group = warps * (rpw // 2 if epi == EPI_GELU else rpw)
    n_groups = -(-n_rows // per_group)
    shared = _need_shared(fn, 4 * k_len)
    resident = -(-resident_blocks(fn, warps * 32, shared) // splits) if resident_grid else n_groups
    grid_x = head_blocks(fn, warps * 32, n_groups, shared) if head else min(n_groups, resident, max_blocks or n_groups)
    args, held = pack(W, np.int32(n_rows), np.int32(ld), np.int32(k_len), src, x_in, np.float32(x_scale), delta,
                      np.int32(delta_parts), delta_w, resid_out, norm_w, np.float32(eps), y, logits,
                      np.float32(softcap or 0.0), part_v, part_i, suppress, n_suppress)
    out_rows = n_rows * (1 if epi == EPI_GELU else splits)
    nbytes = int(W.nbytes) + 4 * ld + (2 if head else 4) * out_rows
    return Launch(name, fn, (grid_x, splits, 1), (warps * 32, 1, 1), args, shared, nbytes, held=held)


def attention(fns, name: str, qkv, nq: int, nkv: int, head_dim: int, *, q_norm, k_norm, eps: float,
              rope_cos, rope_sin, pos, K, V, window: int | None, scale: float, softcap: float | None,
              part, counter, out, chunk: int = ATTN_CHUNK, threads: int = ATTN_THREADS,
              batch: int = 0, cluster: int = 8, clusters: int = 0, cluster_keys: int = 0) -> Launch:
    """One layer's attention launch; K, V: [1 or absent, nkv, capacity, head_dim] fp16 cache buffers.
    batch > 0: attention_cl<HD, nq / nkv, batch, cluster> over `cluster_splits(...)` blocks a KV head, of whose
    clusters those the visible keys need at `cluster_keys` keys a cluster work (0: all); 0: the chunked
    attention<HD>."""
    attention_layout(head_dim)
    if nq % nkv:
        raise KernelShapeError(f"{name}: {nq} query heads do not group over {nkv} KV heads")
    cap = int(K.shape[-2])
    if batch:
        return _attention_cl(fns, name, qkv, nq, nkv, head_dim, q_norm, k_norm, eps, rope_cos, rope_sin, pos, K, V,
                             cap, window, scale, softcap, part, counter, out, threads, batch, cluster, clusters,
                             cluster_keys)
    splits = attention_splits(cap, window, chunk)
    if part.size < nq * splits * (head_dim + 2):
        raise KernelShapeError(f"{name}: attention scratch of {part.size} floats < {nq * splits * (head_dim + 2)}")
    fn = fns[attention_name(head_dim)]
    grp = nq // nkv
    shared = _need_shared(fn, 4 * (grp * head_dim + 2 * head_dim
                                     + grp * max(chunk, splits)))  # p doubles as the combine's weights
    args, held = pack(qkv, np.int32(nq), np.int32(nkv), q_norm, k_norm, np.float32(eps), rope_cos, rope_sin, pos, K,
                      V, np.int32(cap), np.int32(window or 0), np.float32(scale), np.float32(softcap or 0.0),
                      np.int32(chunk), part, counter, out)
    keys = cap if window is None else min(cap, window)
    nbytes = 2 * nkv * keys * head_dim * 2 + 4 * (nq + 2 * nkv) * head_dim + 4 * nq * head_dim
    return Launch(name, fn, (splits, nkv, 1), (threads, 1, 1), args, shared, nbytes, held=held)


def _attention_cl(fns, name, qkv, nq, nkv, D, q_norm, k_norm, eps, rope_cos, rope_sin, pos, K, V, cap, window,
                  scale, softcap, part, counter, out, threads, batch, cluster, clusters, cluster_keys) -> Launch:
    if cluster_keys < 0:
        raise KernelShapeError(f"{name}: cluster_keys >= 0 (0: every cluster works), got {cluster_keys}")
    grp = nq // nkv
    splits = cluster_splits(cap, window, D, threads, batch, cluster, clusters)
    ncl = splits // cluster
    if ncl > 1 and part.size < nq * ncl * (D + 2):
        raise KernelShapeError(f"{name}: attention scratch of {part.size} floats < {nq * ncl * (D + 2)}")
    fn = fns[cluster_name(D, grp, batch, cluster, threads // 32)]
    if cluster > 8:
        _allow_large_clusters(fn)
    units, np2 = split_units(D, threads), 1 << max(0, (grp * batch - 1).bit_length())
    per = -(-(grp * D // 4) // cluster)  # float4s of the output each block of a cluster combines
    floats = units * grp * D + 4 * cluster * per + 4 * -(-cluster * grp // 2) + units * np2 + 3 * units * grp
    shared = _need_shared(fn, 4 * floats)
    args, held = pack(qkv, np.int32(nq), np.int32(nkv), q_norm, k_norm, np.float32(eps), rope_cos, rope_sin, pos, K,
                      V, np.int32(cap), np.int32(window or 0), np.float32(scale), np.float32(softcap or 0.0),
                      np.int32(cluster_keys), part, counter, out)
    keys = cap if window is None else min(cap, window)
    nbytes = 2 * nkv * keys * D * 2 + 4 * (nq + 2 * nkv) * D + 4 * nq * D
    return Launch(name, fn, (splits, nkv, 1), (threads, 1, 1), args, shared, nbytes, held=held)


NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute


def _allow_large_clusters(fn) -> None:
    """Clusters of more than 8 blocks (sm_90 allows 16) need CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    through CuPy's driver binding where it has one, else the driver itself."""
    import cupy

    func = int(fn.kernel.ptr)
    set_attr = getattr(getattr(cupy.cuda, "driver", None), "funcSetAttribute", None)
    if set_attr is not None:
        try:
            set_attr(func, NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        except Exception as e:  # noqa: BLE001 - CuPy's CUDADriverError, named in the message
            raise KernelShapeError(f"attention_cl: a cluster of more than 8 blocks was refused ({e})") from None
        return
    import ctypes

    rc = ctypes.CDLL("libcuda.so.1").cuFuncSetAttribute(ctypes.c_void_p(func),
                                                        ctypes.c_int(NON_PORTABLE_CLUSTER_SIZE_ALLOWED),
                                                        ctypes.c_int(1))
    if rc:
        raise KernelShapeError(f"attention_cl: a cluster of more than 8 blocks was refused (CUresult {rc})")


def advance(fns, part_v, part_i, nparts: int, *, table, hidden: int, x_out, ring, n_dev, pos, t_dev,
            given=None) -> Launch:
    """The token pick and next-input write (one 1024-thread block); given: a sampled token [1] or None."""
    args, held = pack(part_v, part_i, np.int32(nparts), given, table, np.int32(hidden), x_out, ring,
                      np.int32(ring.size), n_dev, pos, t_dev)
    return Launch("advance", fns["advance"], (1, 1, 1), (1024, 1, 1), args, 0, 12 * nparts + 2 * hidden, held=held)
