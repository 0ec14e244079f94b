"""H200 probe: can a persistent kernel whose copy engine runs ahead of its dependencies stream a layer's GEMVs faster?

The per-kernel step pays, at every GEMV, a ramp (first weights in flight only once the kernel's blocks are resident)
and a wait (its input vector) that nothing fills: the weights do not depend on the input, but the only places to
hold weights loaded early (registers, a few row groups of shared memory) were too small or cost more than they hid
(docs/native_decoder.md). Here one block an SM holds a ring of 16 KB shared-memory stages (RINGS: 8-10 of them) that
a producer warp fills with cp.async.bulk in the order the block will consume its tiles, over every op of every layer,
waiting only for free stages, never for an op's input. Its 5-10 consumer warps wait for an op's input (a device-scope
counter of the previous op's tiles), form it once in shared memory (fp32), then each warp takes its own share of the
block's tiles: a tile is whole rows of W (or a k-slice of them), its dot products against the input, one output a
row. The ring's depth is the lookahead.
Each warp adds its tiles to the op's counter as it finishes (red.release), with no barrier at an op's end (x in two
buffers by op parity); gate|up's rows interleaved (gate i, up i) so a tile's pairs store gelu_tanh(gate) * up; down in
tiles of 4 rows x a quarter of k (its 4 partials summed by the next qkv as it forms x).
Mode 3 (LL): no counters at all: every output float is stored with the step's epoch beside it in one 8-byte store
(NCCL's LL protocol), and the next op's x formation polls the values themselves until each carries the epoch; down in
whole-row tiles (one part). The stand-in then copies qkv's first 1024 outputs to o's input after its wait.
`pd <PD>` (mode 3, prepared in the nineteenth session and not yet run): the producer also prefetches into L2
(cp.async.bulk.prefetch.L2) the tile PD tiles after each one it copies, so DRAM keeps streaming while every stage is
full and the consumers are in their dependency waits (mode 3's stamps: down's input 4.45 us, each small op's ~1.3-1.6).
`per-op launches`: the same plan (down in whole rows) as one launch an op with PDL, one simple register GEMV (opk):
waiting on the previous launch (griddepcontrol.wait) and reading x plainly, or never waiting and polling LL inputs:
LL where the kernel boundaries stay.
Earlier runs of this probe: h200_ring_probe_block_tiles_651ec78.json (all 256 consumer threads on each tile, a block
reduction and barrier a tile: ~1.6 us a tile, four times slower than the transport), h200_ring_probe_warp_tiles_768a52e
.json (a tile a warp, rows as runtime branches), h200_ring_probe_6561874.json (rows compiled, stamps; a barrier, fence
and atomic at each op's end, gelu formed by down's x, down one row a tile), h200_ring_probe_6a67e83.json and
_5f840f9.json (this kernel before mode 3), _2e75c57.json (mode 3's first run) and _717805a.json (mode 3 with one x
buffer and 12 warps: slower; reverted), _split_99ca0bb.json (mode 3 with down's k-split partials: slower; reverted).
docs/native_decoder.md reads them.

Chain: gemma3-1b's GEMVs (h200_chain_probe.Weights: qkv [1536 x 1152] -> o [1152 x 1024] on qkv's first 1024 ->
gate|up [13824 x 1152] -> down [1152 x 6912] on gelu_tanh(gate) * up -> the next layer's qkv), 26 layers, no norms,
residuals or attention. `+ attn <ns>`: an attention stand-in between qkv and o, 16 blocks each spinning <ns> ns
after qkv's counter completes, o waiting on them (the step's attention runs ~6 us on 16 SMs); the step's launches get
the same stand-in as a 16-block kernel, PDL like the rest.
Variants of the ring kernel (template MODE): 0 as above (checked against float64 numpy on 2 layers); 1 the same
without the counter waits (results wrong: a bound on transport + math); 2 transport only (consumers release the
stages unread). Beside them in the same interleaved rounds: the plain read of every matrix (rd<4>, a launch each) and
the decode step's own GEMV launches (native.kernels, PDL; h200_chain_probe.step_gemvs).
-> $OUT/h200_ring_probe.json (ms a 26-layer step, median of interleaved rounds). CuPy only; about a minute.
`--fold` / `--attn` (prepared in the nineteenth session, not yet run): mode 4, mode 3 with the layer's folds compiled
in: Gemma 3's residual stream and its four (1 + w) RMSNorms (qkv's and gate|up's inputs formed from the residual and
the previous op's output, block 0 storing each new residual as LL lines); `--attn` also the attention itself over a
CTX-row cache instead of the stand-in (16 blocks' partials, 4 blocks' combine, LL), checked against float64
(`fold_reference`) first, beside mode 3 without them and the step's GEMV launches -> $OUT/h200_ring_probe_fold.json
or h200_ring_probe_attn.json. The kernels are in scripts/ring_probe_cuda.py.
Usage: OUT=/tmp/out python3 scripts/h200_ring_probe.py [--fold | --attn]
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from h200_chain_probe import QKV, H, I, Q, Weights, plain_reads, step_gemvs  # noqa: E402
from h200_stream_probe import provenance, write  # noqa: E402
from ring_probe_cuda import SRC  # noqa: E402 - the kernels

RMAX = 8
# (stage bytes, stages, consumer warps): stages a multiple of the warps; 160 / 128 KB of lookahead a block
RINGS = ((16384, 10, 5), (16384, 10, 10), (16384, 8, 8))
LL_RINGS = ((16384, 10, 10), (16384, 8, 8))  # mode 3 (LL outputs): x polled by 32 x warps threads
ATTN_NS = 5000
CTX = 1024  # `--attn`'s context (the cache's rows, the current one included)
STAMPED = ((16384, 10, 5),)  # the rings whose block 0 stamps its phases (template STAMP 1)
PDS = (6, 12, 18)  # mode 3 on LL_RINGS[0] with the producer's L2 prefetch PD tiles ahead (13-38 MB in all)
ATTN_PART = 1032  # floats of one block's attention partial: m[4], l[4], acc[4][256] (the kernel's)
DOWN_TILE = (4, I // 4)  # down's tile: 4 rows x a quarter of k (4 copies of 3456 bytes), partials [4, H]
X_BYTES = 2 * 2 * 16 * (I // 8) + 256  # x in shared memory: two buffers of two float4 planes; the folds' sums

OPW = 16  # int64 an op in the table (the kernel's OPW)


def norm_weights(cupy, layers: int, seed: int = 7) -> list:
    """Mode 4's folds, Gemma 3's residual stream and its four RMSNorms around the GEMVs: each layer's (input,
    post-attention, pre-feedforward, post-feedforward) norm weights, fp32 [H] (the norm scales by 1 + w)."""
    rng = np.random.default_rng(seed)
    return [tuple(cupy.asarray((0.1 * rng.standard_normal(H)).astype(np.float32)) for _ in range(4))
            for _ in range(layers)]


def kv_caches(cupy, layers: int, ctx: int, seed: int = 11) -> list:
    """Each layer's (K, V) cache, fp16 [ctx, 256] (rows [0, ctx - 1) read; the current row comes from qkv)."""
    rng = np.random.default_rng(seed)
    return [tuple(cupy.asarray(rng.standard_normal((ctx, 256)).astype(np.float16)) for _ in range(2))
            for _ in range(layers)]


def fold_reference(w: Weights, norms: list, kv: list | None = None) -> np.ndarray:
    """The last layer's down output with the folds, float64: h -> qkv on rms(h, w_in); o on qkv[:Q] (kv: on the
    attention of qkv's 4 query heads over the cache's rows and qkv's current k, v, scaled by 256 ** -0.5); h1 = h +
    rms(o, w_pa); gate|up on rms(h1, w_pre); down on gelu(gate) * up; the next h = h1 + rms(down, w_pf)."""
    from vlmdecode.native.numpy_exec import gelu_tanh

    def rms(v, g):
        return v / np.sqrt(np.mean(v * v) + 1e-6) * (1.0 + g.get().astype(np.float64))

    def attention(qkv, cache):
        keys = np.concatenate([cache[0].get()[:-1].astype(np.float64), qkv[None, Q:Q + 256]])
        vals = np.concatenate([cache[1].get()[:-1].astype(np.float64), qkv[None, Q + 256:]])
        out = []
        for q in qkv[:Q].reshape(4, 256):
            sc = keys @ q / 16.0
            p = np.exp(sc - sc.max())
            out.append(p @ vals / p.sum())
        return np.concatenate(out)

    h = w.x0h.astype(np.float64)
    for layer, ((wq, wo, wgu, wd), (g_in, g_pa, g_pre, g_pf)) in enumerate(zip(w.host, norms)):
        qkv = wq.astype(np.float64) @ rms(h, g_in)
        o_in = qkv[:Q] if kv is None else attention(qkv, kv[layer])
        h1 = h + rms(wo.astype(np.float64) @ o_in, g_pa)
        gu = wgu.astype(np.float64) @ rms(h1, g_pre)
        d = wd.astype(np.float64) @ (gelu_tanh(gu[:I]) * gu[I:])
        h = h1 + rms(d, g_pf)
    return d


def phases(ring, st: np.ndarray, grid: int, cw: int) -> dict:
    """Block 0's stamps -> us a layer by op (mean over layers): the wait for the previous op's counter (from warp 0's
    end of it), forming x, warp 0's tiles (x formed -> its count released); per tile the wait for its stage (asked ->
    full) and its dot products; `release`: warp 0's last tile stored -> its count released."""
    out: dict = {}
    seq = 0
    for j, row in enumerate(ring.table):
        d = out.setdefault(ring.kinds[j], {"wait": [], "x": [], "tiles": [], "stage_wait": [], "dots": [],
                                           "release": []})
        if j:
            d["wait"].append((int(st[3 * j]) - int(st[3 * j - 1])) / 1e3)
        if row[0]:
            d["x"].append((int(st[3 * j + 1]) - int(st[3 * j])) / 1e3)
            d["tiles"].append((int(st[3 * j + 2]) - int(st[3 * j + 1])) / 1e3)
            ntiles = -(-int(row[3]) // int(row[5])) * (int(row[4]) // int(row[6]))
            mine = -(-ntiles // grid)
            for q in range(seq, min(seq + mine, 2048)):
                a, f, e = (int(v) for v in st[1024 + 3 * q:1024 + 3 * q + 3])
                d["stage_wait"].append((f - a) / 1e3)
                d["dots"].append((e - f) / 1e3)
            warp0 = [q for q in range(seq, seq + mine) if q % cw == 0 and q < 2048]
            if warp0:
                d["release"].append((int(st[3 * j + 2]) - int(st[1024 + 3 * warp0[-1] + 2])) / 1e3)
            seq += mine
    return {kind: {n: round(float(np.mean(v)), 3) if v else None for n, v in d.items()} for kind, d in out.items()}


def tile_rows(rows: int, k: int, stage: int, grid: int, cw: int, even: bool = False) -> int:
    """Rows a tile (<= RMAX, fitting a stage; even: pairs kept whole): the largest whose most loaded warp (a block's
    tiles dealt to its `cw` consumer warps) has at most 15% more rows than the best; larger tiles fill more of the
    ring's bytes."""
    most = {}
    for tr in range(2 if even else 1, RMAX + 1, 2 if even else 1):
        if tr * k * 2 > stage:
            break
        ntiles = -(-rows // tr)
        per_block = -(-ntiles // grid)
        most[tr] = -(-per_block // cw) * tr
    return max(tr for tr, m in most.items() if m <= 1.15 * min(most.values()))


class Ring:
    """The ring kernel's op table, outputs and counters for weights `w` (a stand-in of `attn_ns` between each
    layer's qkv and o when > 0), tiles sized for `cw` consumer warps. gate|up's rows are interleaved (gate i, up i)
    so that a tile's pairs give gelu_tanh(gate) * up; down stores DOWN_TILE's k-slice partials, summed by the next
    qkv as it forms its x. `gu` caches the interleaved matrices between instances."""

    def __init__(self, cupy, w: Weights, stage: int, grid: int, cw: int, attn_ns: int = 0, gu: dict | None = None,
                 ll: bool = False, whole_down: bool = False, norms: list | None = None, kv: list | None = None):
        gu = {} if gu is None else gu
        down_tile = (1, I) if ll or whole_down else DOWN_TILE  # LL: one part (x polled as it is, never summed)
        nsl = I // down_tile[1]
        self.ll, self.epoch, self.x0 = ll, cupy.zeros(1, cupy.uint32), w.x0
        self.x0ll = cupy.zeros(2 * H, cupy.uint32)
        plan = []  # (kind, W, x: an array or an earlier kind's output, rows, k, tr, ks, parts, epi, out size)
        for layer, (wq, wo, wgu, wd) in enumerate(w.dev):
            if layer not in gu:
                gu[layer] = cupy.ascontiguousarray(wgu.reshape(2, I, H).transpose(1, 0, 2).reshape(2 * I, H))
            plan.append(("qkv", wq, (self.x0ll if ll else w.x0) if layer == 0 else "down", QKV, H,
                         tile_rows(QKV, H, stage, grid, cw), H, 1 if layer == 0 else nsl, 0, QKV))
            if kv is not None:  # mode 4's attention over this layer's cache (its context L: the cache's rows)
                plan += [("attn_part", None, "qkv", kv[layer][0].shape[0], 16, 1, 1, 0, 0, 16 * ATTN_PART),
                         ("attn_comb", None, "attn_part", 0, 4, 1, 1, 0, 0, Q)]
            elif attn_ns:
                plan.append(("attn", None, "qkv", 0, 0, 1, 1, 0, 0, Q))
            o_in = "attn_comb" if kv is not None else "attn" if attn_ns and ll else "qkv"
            plan += [("o", wo, o_in, H, Q, tile_rows(H, Q, stage, grid, cw), Q, 1, 0,
                      H),
                     ("gate_up", gu[layer], "o", 2 * I, H, tile_rows(2 * I, H, stage, grid, cw, even=True), H, 1, 1,
                      I),
                     ("down", wd, "gate_up", H, I, down_tile[0], down_tile[1], 1, 0, nsl * H)]
        sizes = [p[-1] * (2 if ll else 1) for p in plan]  # LL: {value, epoch} a float
        offs = np.concatenate([[0], np.cumsum([-(-n // 32) * 32 for n in sizes])])
        self.buf = cupy.zeros(int(offs[-1]), cupy.float32)
        self.done = cupy.zeros(len(plan), cupy.uint32)
        self.y = [self.buf[int(offs[i]):int(offs[i]) + n] for i, n in enumerate(sizes)]
        table, last = [], {}
        layer = -1
        for j, (kind, W, x, rows, k, tr, ks, parts, epi, _) in enumerate(plan):
            layer += kind == "qkv"
            if kind in ("attn_part", "attn_comb"):
                row = [0, last[x].data.ptr, self.y[j].data.ptr, rows, k, 1, 1, 0, 0, 0] + [0] * (OPW - 10)
                if kind == "attn_part":
                    row[11], row[12] = kv[layer][0].data.ptr, kv[layer][1].data.ptr
                row[15] = 1 if kind == "attn_part" else 2
                table.append(row)
                last[kind] = self.y[j]
                continue
            if W is None:
                table.append([0, last[x].data.ptr if ll else 0, self.y[j].data.ptr if ll else 0, 0, 0, 1, 1, 0, 0,
                              attn_ns])
                last[kind] = self.y[j]
                continue
            xin = last[x] if isinstance(x, str) else x
            table.append([W.data.ptr, xin.data.ptr, self.y[j].data.ptr, rows, k, tr, ks, parts, epi, 0])
            last[kind] = self.y[j]
        table = [row + [0] * (OPW - len(row)) for row in table]
        if norms is not None:  # mode 4's folds (`fold_reference`): qkv's and gate|up's inputs, block 0's residuals
            assert ll and -(-(H // 2) // (32 * cw)) <= 2, "the folds are mode 4's (LL), at <= 2 pairs a thread"
            z = lambda: cupy.zeros(2 * H, cupy.uint32)  # noqa: E731 - a residual, LL
            self.h0, self.h1, self.norms = [z() for _ in w.dev], [z() for _ in w.dev], norms
            layer = -1
            for kind, row in zip([p[0] for p in plan], table):
                if kind == "qkv":
                    layer += 1
                    w_in = norms[layer][0]
                    row[10:15] = ([2, self.x0ll.data.ptr, 0, w_in.data.ptr, self.h0[layer].data.ptr] if layer == 0
                                  else [1, self.h1[layer - 1].data.ptr, norms[layer - 1][3].data.ptr, w_in.data.ptr,
                                        self.h0[layer].data.ptr])
                elif kind == "gate_up":
                    row[10:15] = [1, self.h0[layer].data.ptr, norms[layer][1].data.ptr, norms[layer][2].data.ptr,
                                  self.h1[layer].data.ptr]
        self.n_ops, self.kinds, self.table = len(plan), [p[0] for p in plan], table
        self.tiles = sorted({(kind, r[3], r[4], r[5], r[6]) for kind, r in zip(self.kinds, table) if r[0]})
        self.ops = cupy.asarray(np.array(table, dtype=np.int64))

    def out(self) -> np.ndarray:
        y = self.y[-1].get()
        return (y[::2] if self.ll else y).astype(np.float64).reshape(-1, H).sum(0)


def setup():
    """The probe's compiled kernels and step builders, shared by main() and layer_run(): a namespace of sms, res (the
    results skeleton), stamps, label, ring_step, op_step and the kernels."""
    from types import SimpleNamespace

    import cupy
    import h200_native as hn

    from vlmdecode.native import kernels as K

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    name = lambda s, n, cw, m, st, pd: f"ring<{s},{n},{cw},{m},{st},{pd}>"  # noqa: E731
    keys = ([(*r, m, 0, 0) for r in RINGS for m in (0, 1, 2)] + [(*r, 3, 0, 0) for r in LL_RINGS]
            + [(*r, m, 1, 0) for r in STAMPED for m in (0, 1)] + [(*LL_RINGS[0], 3, 1, 0)]
            + [(*LL_RINGS[0], 3, st, pd) for pd in PDS for st in (0, 1)] + [(*LL_RINGS[0], 4, st, 0) for st in (0, 1)])
    mod = cupy.RawModule(code=SRC, options=("-std=c++17",),
                         name_expressions=[name(*k) for k in keys] + ["spin16", "ll_prep", "opk<0>", "opk<1>",
                                                                        "opspin<0>", "opspin<1>"])
    shared = {r: r[0] * r[1] + 16 * r[1] + X_BYTES for r in {*RINGS, *LL_RINGS}}  # the stages, their barriers, x
    fns = {}
    for key in keys:
        fns[key] = fn = mod.get_function(name(*key))
        fn.max_dynamic_shared_size_bytes = shared[key[:3]]
    stamps = cupy.zeros(1024 + 3 * 2048, cupy.uint64)
    spin, prep = mod.get_function("spin16"), mod.get_function("ll_prep")
    opk = {ll: mod.get_function(f"opk<{ll}>") for ll in (0, 1)}
    for fn in opk.values():
        fn.max_dynamic_shared_size_bytes = X_BYTES
    opspin = {ll: mod.get_function(f"opspin<{ll}>") for ll in (0, 1)}
    res: dict = {"provenance": provenance("graph replays (CUDA events), medians of 5 interleaved rounds; each step "
                                          "zeroes its counters (modes 0-2) or advances its epoch (mode 3) first"),
                 "sms": sms, "grid": sms, "rings": [list(r) for r in RINGS], "ll_rings": [list(r) for r in LL_RINGS],
                 "attn_ns": ATTN_NS, "registers": {name(*key): int(fn.num_regs) for key, fn in fns.items()},
                 "check": {}, "layers": 26, "tiles": {}, "ms": {}}
    label = lambda r: f"ring {r[0] // 1024}K x{r[1]} {r[2]}w"  # noqa: E731

    def prep_launch(ring: Ring):
        return K.Launch("ll_prep", prep, (1, 1, 1), (1024, 1, 1), (K.ptr(ring.epoch), K.ptr(ring.x0),
                                                                    K.ptr(ring.x0ll), np.int32(H)), 0, 0)

    def ring_step(ring: Ring, r: tuple, m: int, st: int = 0, pd: int = 0) -> list:
        first = prep_launch(ring) if m >= 3 else partial(ring.done.fill, 0)
        return [first, K.Launch("ring", fns[(*r, m, st, pd)], (sms, 1, 1), (32 * (r[2] + 1), 1, 1),
                                (K.ptr(ring.ops), np.int32(ring.n_ops), K.ptr(ring.done), K.ptr(stamps),
                                 K.ptr(ring.epoch)), shared[r], 0)]

    def op_step(ring: Ring) -> list:
        """One launch an op (PDL): opk<0> waiting on the previous launch, or opk<1> polling LL inputs."""
        ll = int(ring.ll)
        out = [prep_launch(ring) if ll else partial(ring.done.fill, 0)]
        for j, row in enumerate(ring.table):
            ptr = np.uint64(ring.ops.data.ptr + 8 * OPW * j)
            if row[0] == 0:
                out.append(K.Launch("attn", opspin[ll], (16, 1, 1), (32, 1, 1), (ptr, K.ptr(ring.epoch)), 0, 0,
                                    pdl=True))
            else:
                units = row[3] // (2 if row[8] else 1)
                out.append(K.Launch("op", opk[ll], (min(-(-units // 8), 2 * sms), 1, 1), (256, 1, 1),
                                    (ptr, K.ptr(ring.epoch)), X_BYTES, 0, pdl=True))
        return out

    def step_launches(w: Weights):
        """The decode step's own GEMV launches over `w` (PDL), alone and with the attention stand-in after each
        qkv: {name: launches}, and the buffers they use (kept alive by the caller)."""
        gemvs, keep = step_gemvs(cupy, K, w)
        stand_in = lambda: K.Launch("attn", spin, (16, 1, 1), (32, 1, 1), (np.uint64(ATTN_NS),), 0, 0,  # noqa: E731
                                    pdl=True)
        return {"step GEMV launches, PDL": gemvs,
                f"step GEMV launches, PDL + attn {ATTN_NS}": [x for i, g in enumerate(gemvs)
                                                              for x in ([g, stand_in()] if i % 4 == 0 else [g])]}, keep

    return SimpleNamespace(cupy=cupy, hn=hn, sms=sms, res=res, stamps=stamps, label=label,
                           ring_step=ring_step, op_step=op_step, step_launches=step_launches)


def main() -> None:
    c = setup()
    cupy, hn, sms, res, stamps, label = c.cupy, c.hn, c.sms, c.res, c.stamps, c.label
    ring_step, op_step = c.ring_step, c.op_step
    variants = [(r, 0) for r in RINGS] + [(r, 3) for r in LL_RINGS]  # (ring, mode) of the checks and the A/B
    small = Weights(cupy, 2, seed=1)
    ref = small.reference()
    gu_small: dict = {}
    for r, m in variants:
        for attn in (0, ATTN_NS):
            rg = Ring(cupy, small, r[0], sms, r[2], attn, gu_small, ll=m == 3)
            hn.time_graph(ring_step(rg, r, m), reps=3, pdl=None)  # (mode 3: three epochs, each checked by its polls)
            res["check"][f"{label(r)} mode {m} attn {attn}"] = float(np.abs(rg.out() - ref).max() / np.abs(ref).max())
            for pd in PDS if m == 3 and r == LL_RINGS[0] else ():
                hn.time_graph(ring_step(rg, r, m, 0, pd), reps=3, pdl=None)
                res["check"][f"{label(r)} mode 3 pd {pd} attn {attn}"] = float(
                    np.abs(rg.out() - ref).max() / np.abs(ref).max())
    for ll in (False, True):  # the per-op launches over the same plan (down in whole rows)
        for attn in (0, ATTN_NS):
            rg = Ring(cupy, small, 16384, sms, 8, attn, gu_small, ll=ll, whole_down=True)
            hn.time_graph(op_step(rg), reps=3, pdl=None)
            res["check"][f"per-op {'LL' if ll else 'wait'} attn {attn}"] = float(
                np.abs(rg.out() - ref).max() / np.abs(ref).max())
    print("max rel err vs float64:", res["check"], flush=True)
    del small, rg, gu_small
    w = Weights(cupy, 26)
    res["weight_bytes"] = w.nbytes
    steps = {"plain read, one launch a matrix": plain_reads(cupy, w, sms)}
    step_steps, keep = c.step_launches(w)
    steps.update(step_steps)
    rings, gu = {}, {}  # alive to the end: the launches hold their pointers
    for r, m in variants:
        for attn in (0, ATTN_NS):
            rings[(r, attn, m == 3)] = Ring(cupy, w, r[0], sms, r[2], attn, gu, ll=m == 3)
        res["tiles"][f"{label(r)} mode {m}"] = rings[(r, 0, m == 3)].tiles
        for mode in ((0, 1, 2) if m == 0 else (3,)):
            for attn in ((0, ATTN_NS) if mode in (0, 3) else (0,)):
                steps[f"{label(r)} mode {mode}" + (f" + attn {attn}" if attn else "")] = ring_step(
                    rings[(r, attn, m == 3)], r, mode)
    for ll in (False, True):
        for attn in (0, ATTN_NS):
            rings[("per-op", attn, ll)] = rg = Ring(cupy, w, 16384, sms, 8, attn, gu, ll=ll, whole_down=True)
            steps[f"per-op launches, {'LL' if ll else 'PDL wait'}" + (f" + attn {attn}" if attn else "")] = \
                op_step(rg)
    lr = LL_RINGS[0]
    for pd in PDS:  # mode 3 with the producer's L2 prefetch, on the mode 3 rings built above
        for attn in (0, ATTN_NS):
            steps[f"{label(lr)} mode 3 pd {pd}" + (f" + attn {attn}" if attn else "")] = ring_step(
                rings[(lr, attn, True)], lr, 3, 0, pd)
    times: dict = {nm: [] for nm in steps}
    for _ in range(5):  # interleaved rounds
        for nm, st in steps.items():
            times[nm].append(hn.time_graph(st, reps=6, pdl=None) * len(st))  # ms a step
    del keep
    res["stamped"] = {}
    stamped = [(r, m, a) for r in STAMPED for m, a in ((0, 0), (0, ATTN_NS), (1, 0))]
    lls = [(LL_RINGS[0], 3, a, pd) for pd in (0, *PDS) for a in (0, ATTN_NS)]
    for r, m, attn, pd in [(r, m, a, 0) for r, m, a in stamped] + lls:  # block 0's stamps, one replay each
        stamps.fill(0)
        ring = rings[(r, attn, m == 3)]
        tag = f"{label(r)} mode {m}" + (f" pd {pd}" if pd else "")
        res["ms"][f"{tag} stamped" + (f" + attn {attn}" if attn else "")] = round(
            hn.time_graph(ring_step(ring, r, m, 1, pd), reps=1, pdl=None) * 2, 4)
        res["stamped"][f"{tag} attn {attn}"] = phases(ring, stamps.get(), sms, r[2])
    print(json.dumps(res["stamped"]), flush=True)
    res["ms"].update({nm: round(float(np.median(t)), 4) for nm, t in times.items()})
    res["tb_per_s"] = {nm: round(w.nbytes / (t * 1e-3) / 1e12, 3) for nm, t in res["ms"].items()}
    for nm, t in sorted(res["ms"].items(), key=lambda kv: kv[1]):
        print(f"{t:8.4f} ms  {res['tb_per_s'][nm]:6.3f} TB/s  {nm}", flush=True)
    write("h200_ring_probe.json", res)


def layer_run(real_attention: bool) -> None:
    """`--fold`: mode 4 with the layer's folds (the residual stream and Gemma's four (1 + w) RMSNorms,
    `fold_reference`) on LL_RINGS[0], beside mode 3 without them and the step's GEMV launches (which fold their
    residual and norm too), each with and without the attention stand-in. `--attn`: also mode 4 with the folds and
    the attention itself over a context of CTX (`kv_caches`; no stand-in). Checked against float64 first; block 0's
    phases stamped. -> $OUT/h200_ring_probe_fold.json or h200_ring_probe_attn.json"""
    c = setup()
    cupy, hn, sms, res, stamps, label, ring_step = c.cupy, c.hn, c.sms, c.res, c.stamps, c.label, c.ring_step
    lr = LL_RINGS[0]
    small = Weights(cupy, 2, seed=1)
    norms_small, kv_small = norm_weights(cupy, 2), kv_caches(cupy, 2, CTX)
    checks = [(attn, None) for attn in (0, ATTN_NS)] + ([(0, kv_small)] if real_attention else [])
    for attn, kv in checks:
        rg = Ring(cupy, small, lr[0], sms, lr[2], attn, ll=True, norms=norms_small, kv=kv)
        ref = fold_reference(small, norms_small, kv)
        hn.time_graph(ring_step(rg, lr, 4), reps=3, pdl=None)
        res["check"][f"{label(lr)} mode 4 fold" + (" attention" if kv else f" attn {attn}")] = float(
            np.abs(rg.out() - ref).max() / np.abs(ref).max())
    print("max rel err vs float64:", res["check"], flush=True)
    assert max(res["check"].values()) < 1e-3, res["check"]
    del small, rg, kv_small
    w = Weights(cupy, 26)
    norms = norm_weights(cupy, 26)
    kv = kv_caches(cupy, 26, CTX) if real_attention else None
    steps, keep = c.step_launches(w)
    rings, gu = {}, {}  # alive to the end: the launches hold their pointers
    variants = [(m, attn, None) for m in (3, 4) for attn in (0, ATTN_NS)] + ([(4, 0, kv)] if real_attention else [])
    for m, attn, cache in variants:
        tag = f"{label(lr)} mode {m}" + (" fold" if m == 4 else "") + (
            f" + attention ctx {CTX}" if cache else f" + attn {attn}" if attn else "")
        rings[tag] = Ring(cupy, w, lr[0], sms, lr[2], attn, gu, ll=True, norms=norms if m == 4 else None, kv=cache)
        steps[tag] = ring_step(rings[tag], lr, m)
    times: dict = {nm: [] for nm in steps}
    for _ in range(5):  # interleaved rounds
        for nm, st in steps.items():
            times[nm].append(hn.time_graph(st, reps=6, pdl=None) * len(st))  # ms a step
    del keep
    res["ms"] = {nm: round(float(np.median(t)), 4) for nm, t in times.items()}
    res["stamped"] = {}
    for tag, rg in rings.items():
        stamps.fill(0)
        hn.time_graph(ring_step(rg, lr, 4 if " fold" in tag else 3, 1), reps=1, pdl=None)
        res["stamped"][tag] = phases(rg, stamps.get(), sms, lr[2])
    print(json.dumps(res["stamped"]), flush=True)
    for nm, t in sorted(res["ms"].items(), key=lambda kv_: kv_[1]):
        print(f"{t:8.4f} ms  {nm}", flush=True)
    write("h200_ring_probe_attn.json" if real_attention else "h200_ring_probe_fold.json", res)

if __name__ == "__main__":
    args = sys.argv[1:]
    layer_run("--attn" in args) if {"--fold", "--attn"} & set(args) else main()
