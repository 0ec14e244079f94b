"""The block shapes of a native decode step's kernels: one frozen dataclass, `Shapes`, whose class defaults and
`for_model` / `for_head_dim` presets are the fastest measured on the H200 (each field's comment names its results
file), and `attention_blocks`, the grid a layer's attention takes with them.

What it is not: the kernels' launch geometry or argument packing (`native.kernels`, which these shapes feed) or the
order of a step (`native.decoder`). Plain Python: no GPU needed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from . import tiled_gemv
from .kernels import (
    ATTN_CHUNK,
    SLICE_TARGET,
    STEP_GEMVS,
    KernelShapeError,
    attention_layout,
    attention_splits,
    cluster_splits,
    loads_per_lane,
    split_fold_max,
    split_k,
)

TILED_GATE_UP = (16, 8, 0)  # for_model's gate|up as gemv_tiled: R 16, 8 warps (124 registers, 2 blocks an SM, a
# tile 18 KB loaded before the wait); across processes 0.967x the step at R 4 (66 registers, 3 blocks an SM), R 8
# 0.983x (h200_gate_up_tile_ab_e11b443.json); R 4 was 0.976x the gemv_split step (h200_tiled_gate_up_ab_88ba30d.json)
TILED_DOWN = (16, 8, 0)  # for_model's down slices as gemv_tiled: R 16, 8 warps (77 registers, 3 blocks an SM); across
# processes 0.966x the step with down's row-major gemv, R 8 0.966x too (h200_tiled_down_ab_90a8a6d.json)
TILED_QKV = (16, 16, 0)  # for_model's qkv as gemv_tiled EPI_FOLD: R 16, 16 warps (64 registers; one fold slot a
# thread, `tiled_gemv.fold_slots`); gemma3-1b's 96 tiles, fewer than the SMs, each loaded before its block's wait
TILED_O = (16, 8, 0)  # for_model's o as gemv_tiled over its one slice: R 16, 8 warps (98 registers, 72 tiles). With
# TILED_QKV, across processes on the H200 0.989x the step with both row-major, qkv alone 0.986x (o's share within
# the spread; h200_qkv_o_tiled_ab_66a4665.json); on an H100 0.983x and 0.990x (h100_qkv_o_tiled_ab_874b124.json)
MAX_AUTO_CLUSTERS = 8  # attn_clusters_global "auto": at most this many clusters a KV head (8 x 16 blocks <= 132 SMs)


@dataclass(frozen=True)
class Shapes:
    """Block shapes of a decode step's kernels: (warps per block, rows per warp[, PF[, blocks]]) of each GEMV (GELU:
    rows come in (gate, up) pairs, so an even count; PF 0: weights loaded after the prologue, fewer registers; 2:
    double buffered, `gemv_name`; blocks: a cap on the grid, 0 or absent: every block the GPU holds at once), the
    split-K slice target of the down projection, and the attention's keys per block and threads. Class defaults:
    the fastest measured at gemma3-1b's shapes on the H200 (data/results/h200_native_kernels.json, from
    scripts/native_kernel_bench.py); the decoder starts from `for_head_dim` (attention's shape by head dim)."""

    qkv: tuple = (8, 1)
    qkv_tiled: tuple = ()  # (R, warps, MB): qkv as gemv_tiled EPI_FOLD over a one-slice tiled copy of its weights
    # (`TILED_QKV`, for_model's where it tiles); (): qkv above
    o: tuple = (8, 1)
    o_tiled: tuple = ()  # (R, warps, MB): o as gemv_tiled over a tiled copy of its weights (one slice,
    # `native.tiled_gemv.layout_slices`; `TILED_O`); (): o above. R 8: 0.996x (h200_gate_up_tile_ab_e11b443.json)
    gate_up: tuple = (8, 2, 3)  # PF 3: half the warps' first rows in flight while the other half folds (gemv_split,
    # 78 registers, h200_gate_up_split_ab_321767e.json); PF 1 and 2 need 128 (fewer blocks an SM)
    gate_up_tiled: tuple = ()  # (R, warps, MB): gate|up as gemv_tiled over a tiled copy of its weights (a lane a
    # row, R rows a tile, MB blocks an SM its register cap leaves room for; `native.tiled_gemv`); (): gate_up above
    down: tuple = (4, 1, 2)  # double-buffered, at no register cost (h200_gemv_prefetch.json)
    down_tiled: tuple = ()  # (R, warps, MB): down's split-K slices as gemv_tiled over a tiled copy of its weights
    # (`native.tiled_gemv.layout_slices`); (): down above
    head: tuple = (8, 2, 0)  # grid-stride, <= 1024 blocks; PF 0 keeps more blocks resident (same file)
    slice_target: int = SLICE_TARGET
    attn_chunk: int = ATTN_CHUNK
    attn_threads: int = 128
    # attention_cl (attn_batch > 0; 0: the chunked attention): keys a sub-group of lanes holds at
    # once, blocks a thread-block cluster, clusters a KV head (0: `cluster_splits`); threads: attn_threads. Reads
    # windowed KV buffers (rings); the fastest in the attention sweep (h200_attention_sweep.json)
    attn_batch: int = 8
    attn_cluster: int = 16
    attn_clusters: int = 1
    attn_clusters_global: int | str = 0  # clusters a KV head on layers with no window (0: attn_clusters; "auto": as
    # many as the KV capacity needs at attn_cluster_keys keys a cluster, <= MAX_AUTO_CLUSTERS). The grid, fixed at
    # capture, holds them all; at each position only those its visible keys need work (`attn_cluster_keys`)
    attn_cluster_keys: int = 2048  # keys a cluster takes before the next cluster of its KV head joins (0: every
    # cluster of the grid works at every position), on every layer: attn_clusters and attn_clusters_global are the
    # grid's most; more clusters pay off past ~2048 keys (docs/native_decoder.md)
    pdl: bool = True  # programmatic dependent launch (sm_90+, `native.pdl`): a kernel overlaps its predecessor's tail

    def __post_init__(self):
        for name in ("gate_up_tiled", "down_tiled", "o_tiled", "qkv_tiled"):
            t = getattr(self, name)
            if t and not (len(t) == 3 and all(isinstance(v, int) and v >= 0 for v in t)):
                raise KernelShapeError(f"{name} takes () or (R, warps, MB), three counts, got {t!r}")
        g, k = self.attn_clusters_global, self.attn_cluster_keys
        if not (g == "auto" or (isinstance(g, int) and g >= 0)) or not (isinstance(k, int) and k >= 0):
            raise KernelShapeError(f"attn_clusters_global takes a count >= 0 or 'auto' and attn_cluster_keys a count "
                                   f">= 0, got {g!r} and {k!r}")
        if g == "auto" and not k:
            raise KernelShapeError("attn_clusters_global 'auto' sizes the grid at attn_cluster_keys keys a cluster: "
                                   "give attn_cluster_keys > 0")

    @classmethod
    def for_model(cls, head_dim: int, hidden: int, intermediate: int = 0, num_heads: int = 0,
                  num_kv_heads: int = 0) -> Shapes:
        """`for_head_dim`'s shapes, with gate|up and down's split-K slices (the intermediate size given), qkv and o
        (the head counts given) as gemv_tiled (`TILED_GATE_UP`, `TILED_DOWN`, `TILED_QKV`, `TILED_O`) where their
        weights tile, gate|up else at PF 0 where the hidden size is longer than PF 3's fold takes
        (`split_fold_max`)."""
        out = cls.for_head_dim(head_dim)
        tiles = {}
        if intermediate:
            k = intermediate // split_k(intermediate, out.slice_target)
            tiles["gate_up_tiled"] = (TILED_GATE_UP, lambda: tiled_gemv.check(intermediate, hidden, *TILED_GATE_UP[:2]))
            tiles["down_tiled"] = (TILED_DOWN, lambda: tiled_gemv.check_slices(hidden, k, *TILED_DOWN[:2]))
        if num_heads and num_kv_heads:
            rows = (num_heads + 2 * num_kv_heads) * head_dim
            tiles["qkv_tiled"] = (TILED_QKV, lambda: tiled_gemv.check_fold_rows(rows, hidden, *TILED_QKV[:2]))
            tiles["o_tiled"] = (TILED_O, lambda: tiled_gemv.check_slices(hidden, num_heads * head_dim, *TILED_O[:2]))
        for field, (t, check) in tiles.items():
            try:
                check()
                out = replace(out, **{field: t})
            except KernelShapeError:
                pass  # gemv's row layout takes any multiple of 8: the row-major gemv
        if len(out.gate_up) > 2 and int(out.gate_up[2]) == 3 and hidden > split_fold_max(out.gate_up[0]):
            out = replace(out, gate_up=(*out.gate_up[:2], 0, *out.gate_up[3:]))
        return out

    @classmethod
    def for_head_dim(cls, head_dim: int) -> Shapes:
        """The decoder's defaults for a model of this head dim. At head_dim >= 256 a sub-group of attention_cl is a
        whole warp (`attention_layout`), so 4 warps a block hold only 4 key rows at once: 8 warps and batches of 4
        keys (128 sub-groups a cluster of 16, gemma3-1b's 512-key window once over) replay its step 2% faster than
        the class defaults, measured side by side (h200_native_attn_shapes_d8128b3.json); and live clusters sized by
        the KV capacity on the layers with no window ("auto": 0.982x at context 4096, 0.999x at 1024 in the same
        capacity, h200_live_clusters_ctx4096_ab_a0cb874.json). Smaller head dims keep the class defaults (tiny's
        step is 15% slower at 256 threads, h200_native_launch_d8128b3.json; "auto" is not measured there)."""
        if attention_layout(head_dim)[1] == 32:
            return cls(attn_threads=256, attn_batch=4, attn_clusters_global="auto")
        return cls()

    def clusters_for(self, window: int | None, capacity: int) -> int:
        """attention_cl's clusters a KV head in the grid of a layer with this window (None: every key visible) and KV
        capacity."""
        g = self.attn_clusters_global
        if window is not None or not g:
            return self.attn_clusters
        if g == "auto":
            return min(MAX_AUTO_CLUSTERS, -(-capacity // self.attn_cluster_keys))
        return g

    def with_overrides(self, over: dict) -> Shapes:
        """These shapes with the fields `over` names replaced, from JSON values (lists become tuples): what the
        H200 scripts' --shapes / $NATIVE_SHAPES give, e.g. {"qkv": [8, 2], "attn_threads": 128}."""
        known = [f.name for f in fields(self)]
        unknown = sorted(set(over) - set(known))
        if unknown:
            raise KernelShapeError(f"unknown Shapes fields {unknown}; the fields are {known}")
        return replace(self, **{k: tuple(v) if isinstance(v, list) else v for k, v in over.items()})

    def gemv(self, cls: str) -> dict:
        """gemv()'s block-shape keywords for one step GEMV class (STEP_GEMVS): warps, rpw, prefetch_weights
        (PF 1 when the shape names none) and, where the shape names a fourth element, max_blocks."""
        wr = getattr(self, cls)
        kw = dict(warps=wr[0], rpw=wr[1], prefetch_weights=int(wr[2]) if len(wr) > 2 else 1)
        return kw | ({"max_blocks": int(wr[3])} if len(wr) > 3 else {})

    def gemv_instances(self, k_lens: dict) -> set:
        """The (nv, rpw, epi, pf) of compile_module for these step GEMV classes; k_lens: class -> the reduction
        slice its launches stream (down: one split-K slice)."""
        out = set()
        for cls, k_len in k_lens.items():
            kw = self.gemv(cls)
            out.add((loads_per_lane(k_len), kw["rpw"], STEP_GEMVS[cls], kw["prefetch_weights"]))
        return out


def attention_blocks(shapes: Shapes, capacity: int, window: int | None, head_dim: int) -> int:
    """Blocks a KV head of a layer's attention launch with `shapes` (its scratch holds nq x this x (HD + 2))."""
    if shapes.attn_batch:
        return cluster_splits(capacity, window, head_dim, shapes.attn_threads, shapes.attn_batch, shapes.attn_cluster,
                              shapes.clusters_for(window, capacity))
    return attention_splits(capacity, window, shapes.attn_chunk)
