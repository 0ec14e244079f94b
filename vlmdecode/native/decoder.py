"""The native CUDA decoder: a recognised plan's weights run by our own kernels, one CUDA graph per step.

    prefill   prefill="native" (default): `native.prefill` -- cuBLAS GEMMs and row kernels over the same weights,
              one CUDA graph per prompt-length bucket, writing the prompt's K/V straight into the fixed buffers
              [1, kv_heads, capacity, head_dim] (GroupQueryAttention's layout) the step reads and appends to
              (a windowed layer's buffer of exactly its window as a ring, position p at row p % window), and
              ending in the step's own LM head launch. prefill="onnxruntime": the folder's ONNX decoder through
              onnxruntime CUDA (eager) into the same buffers; a ring buffer is then rotated once
              (`_ring_after_prefill`). Given `ort` (a CudaDecoder), this decoder serves that decoder's
              prefill="native" instead: its KV, onnxruntime's windowed row layout, no native step.
    step      5 kernels a layer + LM head + advance (`native.kernels`):
                qkv      residual fold of the previous layer's down output (+ post-FFN norm) + input norm
                         in the prologue, QKV GEMV, or (Shapes.qkv_tiled) gemv_tiled EPI_FOLD over a tiled copy
                attn     q/k norm + rotary + KV append + split-sequence attention + combine (cluster)
                o        o GEMV, or (Shapes.o_tiled) gemv_tiled over a tiled copy
                gate_up  residual fold of o (+ post-attention norm) + pre-FFN norm, gate|up GEMV,
                         gelu_tanh(g) * u in the epilogue (gemv_split: half the warps fold while the
                         other half's first rows are in flight), or by default where the weights tile
                         (Shapes.gate_up_tiled) gemv_tiled, a lane a row over a tiled copy of the weights
                         (`native.tiled_gemv`; the rows stay for the native prefill's GEMMs)
                down     split-K down GEMV (partials summed by the next prologue), or (Shapes.down_tiled)
                         gemv_tiled over a tiled copy of each slice
              head: residual fold + final norm, LM head GEMV, softcap, fp16 logits and argmax partials;
              a greedy step that nobody reads logits of (the default loop: lookahead, or sync_every > 1) runs
              the bounded head instead (`native.bounded_head`, head="auto"/"bounded"): the same token from an
              int8 copy of the head (head_bits=6: a 6-bit one) and the few rows that can win; head="full" keeps
              the fp16 head everywhere;
              advance: the token -> its embedding row into the step's input, the id ring, the position.
              The whole step (greedy: with advance) is captured ONCE per decoder as a CUDA graph
              (CuPy stream capture) and replayed every token. By default (lookahead, sync_every 1) step
              t + 1 is queued before token t is read, so the GPU never waits on the host between tokens;
              lookahead=False: the host reads the id ring every `sync_every` tokens. Sampling replays
              the step without advance, draws with the package's CuPy sampler (as device mode) and
              launches advance with the drawn id, uncaptured.

The residual stream is fp32 in two ping-pong buffers (a kernel never writes the buffer it reads). A
plan the kernels cannot run (dtype, shapes, windowed-KV capacities) is a PlanError; there is no
fallback to onnxruntime for the step. Not here: the kernels' code (`native.kernels_src`), the pipeline.
"""

from __future__ import annotations

import numpy as np

from ..buffers import host_array
from ..decoders.base import PREFILLS, Decoder, DecoderError, check_max_length
from ..decoders.cuda import MAX_SUPPRESS, CudaDecoder, argmax_blocks, device_kernels
from ..decoders.token_ring import check_sync_every
from ..modelfolder import ModelFolder
from ..sampling import Sampler, sample_unchecked
from . import bounded_head as BH
from . import kernels as K
from . import tiled_gemv as TG
from . import weights as DW
from .loop import NativeLoop
from .pdl import supported as pdl_supported
from .plan import DecoderPlan, PlanError
from .shapes import Shapes, attention_blocks
from .timing import StepTiming

KERNELS_PER_LAYER = 5
HEADS = ("auto", "bounded", "full")  # auto: bounded where the hidden size allows it (a multiple of 16; 64 at 6 bits)


def folder_plan(folder: ModelFolder) -> DecoderPlan:
    """The recognised plan of a folder's decoder (PlanError when the graph is not a recognised Gemma 3)."""
    from .recognise import recognise

    return recognise(folder.decoder.path)


def check_plan(plan: DecoderPlan, max_length: int) -> None:
    """Everything the native kernels need of a plan, as PlanErrors that say what is accepted."""
    if np.dtype(plan.dtype) != np.float16:
        raise PlanError(f"{plan.source}: the native kernels store fp16 weights; this decoder's dtype is "
                        f"{np.dtype(plan.dtype)} (build the folder with --dtype fp16)")
    for L in plan.layers:
        if L.kv_capacity is not None and L.kv_capacity != L.window:
            raise PlanError(f"{plan.source}: layer {L.index} keeps a windowed KV cache of {L.kv_capacity} rows for a "
                            f"window of {L.window}; the native step reads a windowed layer's buffer as a ring of "
                            "exactly its window (onnxruntime CUDA's layout) or a buffer of max_length rows")
        if L.rope_cos.shape[0] < max_length:
            raise PlanError(f"{plan.source}: layer {L.index}'s rotary table has {L.rope_cos.shape[0]} positions, "
                            f"fewer than max_length {max_length}")
    try:
        for n in (plan.hidden, plan.q_size, plan.intermediate // K.split_k(plan.intermediate)):
            K.loads_per_lane(n)
        K.attention_layout(plan.head_dim)
    except K.KernelShapeError as e:
        raise PlanError(f"{plan.source}: {e}") from None
    if plan.num_heads % plan.num_kv_heads:
        raise PlanError(f"{plan.source}: {plan.num_heads} query heads do not group over {plan.num_kv_heads} KV heads")


class NativeDecoder(NativeLoop, StepTiming, Decoder):
    """`vlmdecode.load(dir, "cuda", mode="native")`'s decoder (the `decoders.base` contract): generate() is the
    device loop; prefill() the native prefill (prefill="onnxruntime": onnxruntime's); step() one host-fed native
    step (the body graph)."""

    mode = "native"

    def __init__(self, folder: ModelFolder, device, *, max_length: int | None = None, sync_every: int = 1,
                 plan: DecoderPlan | None = None, shapes: Shapes | None = None, lookahead: bool = True,
                 prefill: str = "native", ort: CudaDecoder | None = None, head: str = "auto", head_bits: int = 8):
        import cupy

        self.cp = cupy
        check_sync_every(sync_every)
        if prefill not in PREFILLS:
            raise ValueError(f"prefill must be one of {PREFILLS}, got {prefill!r}")
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        plan = folder_plan(folder) if plan is None else plan
        check_plan(plan, check_max_length(folder, max_length))
        if head_bits not in BH.BITS:
            raise ValueError(f"head_bits must be one of {BH.BITS}, got {head_bits!r}")
        try:
            BH.check_width(plan.hidden, head_bits)
            fits = True
        except K.KernelShapeError as e:
            if head == "bounded":
                raise PlanError(f"{plan.source}: {e}") from None
            fits = False
        self.head_kind = "full" if head == "full" or not fits or ort is not None else "bounded"
        self.head_bits = head_bits
        if folder.info.kv_layout != "shared":
            raise PlanError(f"{folder.decoder.path.name}: the native step needs the fixed-capacity KV of "
                            "GroupQueryAttention (attention 'gqa'); this decoder's KV grows by Concat")
        # onnxruntime's decoder: its KV buffers (and prefill="onnxruntime"). Given: this decoder serves THAT one's
        # native prefill (CudaDecoder(prefill="native")), writing windowed layers in onnxruntime's row layout
        self.serving = ort is not None
        self.ort = ort if ort is not None else CudaDecoder(folder, device, "eager", max_length=max_length)
        super().__init__(folder, self.ort.device, self.ort.transfers, self.ort.max_length)
        self.plan, self.kv = plan, self.ort.kv
        # a layer's buffer holds max_length positions, or exactly its window: then the native step keeps it as a
        # ring (position p at row p % window), rotated once after onnxruntime's prefill (`_ring_after_prefill`)
        self.ring_layers = [l for l, (k, L) in enumerate(zip(self.kv.keys, plan.layers))
                            if int(k.shape[-2]) != self.max_length and int(k.shape[-2]) == L.window]
        for l, k in enumerate(self.kv.keys):
            if int(k.shape[-2]) != self.max_length and l not in self.ring_layers:
                raise PlanError(f"{folder.decoder.path.name}: layer {l}'s KV buffer holds {int(k.shape[-2])} "
                                f"positions; the native step needs max_length={self.max_length} or the layer's window")
        self.stream, self.stream_ptr = self.ort.stream, self.ort.stream_ptr
        self.prefill_buffers = self.ort.prefill_buffers  # the prompt path stages prompts there (prompt_path)
        # the id ring (decoders.token_ring). lookahead (the default): `logits` may already hold step t+1's row when
        # token t is yielded: lookahead=False for a caller that reads them per token
        self._init_ring(sync_every, lookahead)
        self.captured = self.replayed = self.generations = self.uncaptured_steps = 0
        # SamplingParams.suppress staged in page-locked memory: a pageable upload would wait for the stream (the
        # prompt's vision and embedding runs) before the prefill is even queued
        self.suppress_host = host_array(MAX_SUPPRESS, np.int64, self.device)
        # the device loop's decode step moves no input bytes; each token's id comes back (8 bytes, k at a time)
        self.step_bytes = self.transfers.fixed([("d2h", 8, "token")])
        with self.stream:
            self._upload(plan)
        self._native_prefill = None  # made after the first rebuild: it reads the step's buffers
        self.rebuild(shapes or Shapes.for_model(plan.head_dim, plan.hidden, plan.intermediate, plan.num_heads,
                                                plan.num_kv_heads))
        if prefill == "native":
            from .prefill import NativePrefill

            self._native_prefill = NativePrefill(self, windowed="onnxruntime" if self.serving else "ring")

    def rebuild(self, shapes: Shapes) -> None:
        """(Re)make the step's buffers and launches with these block shapes; the weights stay. Drops the
        captured graphs (the next step captures again). Between generations only."""
        if self.ring_layers and not shapes.attn_batch:
            raise PlanError(f"{self.folder.decoder.path.name}: layers {self.ring_layers} keep a windowed KV buffer "
                            "(a ring); only attention_cl reads rings: use Shapes(attn_batch > 0)")
        self.shapes = shapes
        self._graphs: dict[tuple, object] = {}
        if self._native_prefill is not None:
            self._native_prefill.graphs.clear()  # they point into the buffers made again here
        with self.stream:
            self._buffers(self.plan)
            self._build(self.plan)
        self.stream.synchronize()

    # ---- set-up ----------------------------------------------------------------------------------
    def _upload(self, plan: DecoderPlan) -> None:
        w = DW.upload(self.cp, plan, self.folder, self.head_kind, self.head_bits)
        self.layers, self.final_norm, self.lm_head, self.bound_table, self.table = (
            w.layers, w.final_norm, w.lm_head, w.bound_table, w.table)

    def _buffers(self, plan: DecoderPlan) -> None:
        cp, H, D = self.cp, plan.hidden, plan.head_dim
        nq, nkv = plan.num_heads, plan.num_kv_heads
        self.ksd = K.split_k(plan.intermediate, self.shapes.slice_target)
        splits = max(attention_blocks(self.shapes, self.max_length, L.window, D) for L in plan.layers)
        z = lambda n, dt=cp.float32: cp.zeros(n, dt)  # noqa: E731
        self.x_in = z(H, cp.float16)  # the step's input: the token's embedding row
        self.resid = z((2, H))  # ping-pong residual stream
        self.qkv, self.attn_out, self.o_out = z((nq + 2 * nkv) * D), z(nq * D), z(H)
        self.attn_part = z(nq * splits * (D + 2))
        self.attn_counter = z(plan.num_layers * nkv, cp.int32)  # attention combine counters
        self.m, self.dpart = z(plan.intermediate), z((self.ksd, H))
        self.logits = z(plan.vocab, cp.float16)
        self.part_v, self.part_i = z(K.HEAD_MAX_BLOCKS), z(K.HEAD_MAX_BLOCKS, cp.int64)
        if self.head_kind == "bounded":  # the bounded head's vector, row upper bounds, block maxima of lower bounds
            self.xvec, self.upper, self.low = z(H), z(plan.vocab), z(K.HEAD_MAX_BLOCKS)
        self.n_dev, self.pos, self.t_dev, self.given = (z(1, cp.int64) for _ in range(4))
        self.suppress, self.n_suppress = z(MAX_SUPPRESS, cp.int64), z(1, cp.int32)  # SamplingParams.suppress

    def _build(self, plan: DecoderPlan) -> None:
        H, I, D, nq, nkv = plan.hidden, plan.intermediate, plan.head_dim, plan.num_heads, plan.num_kv_heads
        sh = self.shapes
        gemvs = sh.gemv_instances({"qkv": H, "o": nq * D, "gate_up": H, "down": I // self.ksd, "head": H})
        cl = {(D, nq // nkv, sh.attn_batch, sh.attn_cluster, sh.attn_threads // 32)} if sh.attn_batch else set()
        head_nv = K.loads_per_lane(H)
        bounded = BH.names(H, head_nv, bits=self.head_bits) if self.head_kind == "bounded" else ()
        tiled, dt, ot, qt = sh.gate_up_tiled, sh.down_tiled, sh.o_tiled, sh.qkv_tiled
        DW.retile(self.cp, plan, self.layers, "w_gate_up", lambda w: TG.layout(w, tiled[0]),
                  tiled[0] if tiled else None)
        DW.retile(self.cp, plan, self.layers, "w_down", lambda w: TG.layout_slices(w, dt[0], self.ksd),
                  (dt[0], self.ksd) if dt else None)
        DW.retile(self.cp, plan, self.layers, "w_o", lambda w: TG.layout_slices(w, ot[0], 1), ot[0] if ot else None)
        DW.retile(self.cp, plan, self.layers, "w_qkv", lambda w: TG.layout_slices(w, qt[0], 1), qt[0] if qt else None)
        extra = [TG.name(H, *tiled)] if tiled else []
        extra += [TG.name(I // self.ksd, *dt, K.EPI_PLAIN)] if dt else []
        extra += [TG.name(nq * D, *ot, K.EPI_PLAIN)] if ot else []
        extra += [TG.name(H, *qt, K.EPI_FOLD)] if qt else []
        fns = K.compile_module(gemvs, {D}, cl, (*bounded, *extra))

        def plain(l, cls, W, n_rows, k_len, splits, y, src, t):  # o / down: gemv_tiled over the tiled copy, or gemv
            if t:
                return TG.launch_slices(fns, f"L{l}.{cls}", W[f"w_{cls}_t"], n_rows, k_len, splits, y=y, src=src,
                                        R=t[0], warps=t[1], mb=t[2])
            return K.gemv(fns, f"L{l}.{cls}", W[f"w_{cls}"], n_rows, k_len, splits=splits, y=y, src=src,
                          **sh.gemv(cls))

        Ra, Rb = self.resid[0], self.resid[1]
        eps, scale = plan.eps, float(plan.embed_scale or 1.0)
        steps = []
        for l, (L, W) in enumerate(zip(plan.layers, self.layers)):
            prev = self.layers[l - 1] if l else None
            qfold = dict(src=Ra if l else None, x_in=self.x_in, x_scale=scale, delta=self.dpart if l else None,
                         delta_parts=self.ksd, delta_w=prev["post_ffn_norm"] if l else None, resid_out=Rb,
                         norm_w=W["input_norm"], eps=eps)
            if qt:
                steps.append(TG.launch(fns, f"L{l}.qkv", W["w_qkv_t"], (nq + 2 * nkv) * D, H, y=self.qkv, R=qt[0],
                                       warps=qt[1], mb=qt[2], epi=K.EPI_FOLD, **qfold))
            else:
                steps.append(K.gemv(fns, f"L{l}.qkv", W["w_qkv"], (nq + 2 * nkv) * D, H, y=self.qkv, **qfold,
                                    **sh.gemv("qkv")))
            steps.append(K.attention(fns, f"L{l}.attn", self.qkv, nq, nkv, D, q_norm=W["q_norm"], k_norm=W["k_norm"],
                                     eps=eps, rope_cos=W["cos"], rope_sin=W["sin"], pos=self.pos,
                                     K=self.ort.kv.keys[l].array, V=self.ort.kv.values[l].array, window=L.window,
                                     scale=plan.attn_scale, softcap=plan.attn_softcap, part=self.attn_part,
                                     counter=self.attn_counter[l * nkv:(l + 1) * nkv], out=self.attn_out,
                                     chunk=sh.attn_chunk, threads=sh.attn_threads, batch=sh.attn_batch,
                                     cluster=sh.attn_cluster, clusters=sh.clusters_for(L.window, self.max_length),
                                     cluster_keys=sh.attn_cluster_keys))
            steps.append(plain(l, "o", W, H, nq * D, 1, self.o_out, self.attn_out, ot))
            fold = dict(src=Rb, delta=self.o_out, delta_w=W["post_attn_norm"], resid_out=Ra, norm_w=W["pre_ffn_norm"],
                        eps=eps)
            if tiled:
                steps.append(TG.launch(fns, f"L{l}.gate_up", W["w_gate_up_t"], I, H, y=self.m, R=tiled[0],
                                       warps=tiled[1], mb=tiled[2], **fold))
            else:
                steps.append(K.gemv(fns, f"L{l}.gate_up", W["w_gate_up"], I, H, epi=K.EPI_GELU, y=self.m, **fold,
                                    **sh.gemv("gate_up")))
            steps.append(plain(l, "down", W, H, I // self.ksd, self.ksd, self.dpart, self.m, dt))
        self.head = K.gemv(fns, "head", self.lm_head, plan.vocab, H, epi=K.EPI_HEAD, src=Ra, delta=self.dpart,
                           delta_parts=self.ksd, delta_w=self.layers[-1]["post_ffn_norm"], norm_w=self.final_norm,
                           eps=eps, logits=self.logits, softcap=plan.final_softcap, part_v=self.part_v,
                           part_i=self.part_i, suppress=self.suppress, n_suppress=self.n_suppress, **sh.gemv("head"))
        self.body = steps + [self.head]
        common = dict(table=self.table, hidden=H, x_out=self.x_in, ring=self.ring.array, n_dev=self.n_dev,
                      pos=self.pos, t_dev=self.t_dev)
        self.advance_greedy = K.advance(fns, self.part_v, self.part_i, self.head.grid[0], **common)
        self.bounded = []  # [head_bound, head_pick, their advance]: the bounded greedy step's tail
        if self.head_kind == "bounded":
            bound, pick = BH.launches(
                fns, self.bound_table, self.lm_head, plan.vocab, H, head_nv, self.head.block[0], src=Ra,
                delta=self.dpart, delta_parts=self.ksd, delta_w=self.layers[-1]["post_ffn_norm"],
                norm_w=self.final_norm, eps=eps, softcap=plan.final_softcap, xvec=self.xvec, upper=self.upper,
                low=self.low, part_v=self.part_v, part_i=self.part_i, suppress=self.suppress,
                n_suppress=self.n_suppress)
            self.bounded = [bound, pick, K.advance(fns, self.part_v, self.part_i, pick.grid[0], **common)]
        self.advance_given = K.advance(fns, self.part_v, self.part_i, 0, given=self.given, **common)
        self._prefill_partial = device_kernels(np.float16)[0]
        self._prefill_parts = argmax_blocks(plan.vocab)
        self.advance_prefill = K.advance(fns, self.part_v, self.part_i, self._prefill_parts, **common)
        self.pdl = bool(sh.pdl) and pdl_supported()
        for launch in self.body + self.bounded + [self.advance_greedy, self.advance_given, self.advance_prefill]:
            launch.pdl = self.pdl
            launch.prepare()

    # ---- counters and generation lifetime ----------------------------------------------------------
    def bounded_now(self, greedy: bool) -> bool:
        """Whether a greedy step runs the bounded head now: not when a caller reads the logits per token (the plain
        loop: lookahead off and sync_every 1), whose row only the full head writes."""
        return greedy and self.head_kind == "bounded" and (self.lookahead or self.sync_every > 1)

    def step_launches(self, greedy: bool) -> list:
        """The launches of one step: the body (sampling, host-fed); greedy: + advance, or the bounded tail."""
        if self.bounded_now(greedy):
            return self.body[:-1] + self.bounded
        return self.body + ([self.advance_greedy] if greedy else [])

    def kernels_per_step(self, greedy: bool = True) -> int:
        return len(self.step_launches(greedy))

    def counters(self) -> dict:
        head = f"bounded{self.head_bits}" if self.head_kind == "bounded" and self.head_bits != 8 else self.head_kind
        return {"kernels_per_step": self.kernels_per_step(), "head": head, "pdl": self.pdl,
                "captured": self.captured,
                "replayed": self.replayed,
                "uncaptured_steps": self.uncaptured_steps, "generations": self.generations}

    def begin_generation(self) -> None:
        self.generations += 1  # nothing to release at the end: the graphs live as long as the decoder

    # ---- the step ----------------------------------------------------------------------------------
    def enqueue_step(self, greedy: bool) -> None:
        """Launch one uncaptured step on the decoder's stream (what a capture records)."""
        for launch in self.step_launches(greedy):
            launch()

    def graph(self, greedy: bool):
        """The captured step (with advance when greedy; the bounded head's when `bounded_now`), captured on first
        use."""
        key = (greedy, self.bounded_now(greedy))
        if key not in self._graphs:
            self._graphs[key] = K.capture(self.stream, lambda: self.enqueue_step(greedy))
            self.captured += 1
        return self._graphs[key]

    def replay(self, greedy: bool) -> None:
        self.graph(greedy).launch(self.stream)
        self.replayed += 1
        self.kv.advance(1)

    # ---- the contract's host-fed entry points ------------------------------------------------------
    def prefill(self, x, reuse: bool = False) -> np.ndarray:
        """The prompt into the shared KV buffers (module docstring); the last position's logits [V] on the host."""
        if self._native_prefill is None:
            out = self.ort.prefill(x, reuse)
            self._ring_after_prefill()
            return out
        self.transfers.begin()
        try:
            with self.stream:
                self.n_suppress.fill(0)
                self._native_prefill(x)
                return self._logits_to_host(reuse)
        finally:
            self.transfers.end()

    def _logits_to_host(self, reuse: bool) -> np.ndarray:
        """The logits buffer [V] read on the decoder's stream (counted), float32 unless reuse."""
        out = self.logits.get(stream=self.stream)
        self.transfers.note("d2h", self.logits.nbytes, "logits")
        return out if reuse else out.astype(np.float32)

    def _ring_after_prefill(self) -> None:
        """onnxruntime keeps a windowed layer's last C positions in rows [0, C), oldest first (shifting left
        each step); the native step reads and appends position p at row p % C: rotate once, on the stream."""
        S = self.kv.position
        with self.stream:
            for l in self.ring_layers:
                for buf in (self.kv.keys[l].array, self.kv.values[l].array):
                    C = int(buf.shape[-2])
                    if S > C and S % C:
                        buf[...] = self.cp.roll(buf, S % C, axis=-2)

    def step(self, x, reuse: bool = False) -> np.ndarray:
        """One native step fed from the host (x: [1,1,H] embedding or [[id]]): the body graph, logits [V]."""
        t = self.kv.position
        if t >= self.max_length:
            raise DecoderError(f"KV cache full: position {t} reached max_length={self.max_length}")
        self.transfers.begin()
        try:
            with self.stream:
                if self.info.drive == "ids":
                    self.x_in[...] = self.table[int(np.asarray(x).reshape(-1)[0])]
                else:
                    self.x_in.set(np.ascontiguousarray(np.asarray(x, np.float16).reshape(-1)), stream=self.stream)
                    self.transfers.note("h2d", self.x_in.nbytes, "embeds")
                self.pos.set(np.array([t], np.int64), stream=self.stream)
                self.transfers.note("h2d", 8, "position")
                self.replay(False)
                return self._logits_to_host(reuse)
        finally:
            self.transfers.end()

    def _pick(self, row, sampler: Sampler, step: int, prefill: bool = False) -> None:
        """The token of logits `row` [V] on the device: a Philox draw (sample_unchecked; -1 for a bad row) or
        the greedy argmax (the head kernel's partials, or device mode's argmax over the prefill row)."""
        if sampler.params.do_sample:
            self.given[...] = sample_unchecked(row[None], sampler.params, sampler.uniform(step, 1, self.cp))
            self.advance_given()
        elif prefill:
            ns = len(sampler.params.suppress)
            self._prefill_partial((self._prefill_parts,), (256,), (row, np.int32(self.vocab), self.part_v, self.part_i,
                                                                    self.suppress, np.int32(ns)))
            self.advance_prefill()
        else:
            self.advance_greedy()  # the prefill's head launch wrote this row's partials

    def _start(self, x, sampler: Sampler) -> int:
        """Prefill (onnxruntime's or native), then pick the first token from its last row on the device."""
        ids = sampler.params.suppress  # the head kernel's argmax skips them (read from the device each step)
        if len(ids) > MAX_SUPPRESS:
            raise ValueError(f"native mode suppresses at most {MAX_SUPPRESS} token ids, got {len(ids)}")
        if ids:  # queued on the decoder's stream, asynchronously (the previous generation's copy ran long ago)
            self.suppress_host[: len(ids)] = ids
            rt = self.cp.cuda.runtime
            rt.memcpyAsync(self.suppress.data.ptr, self.suppress_host.ctypes.data, 8 * len(ids),
                           rt.memcpyHostToDevice, self.stream.ptr)
        self.n_suppress.fill(len(ids))
        if self._native_prefill is not None:  # the head launch ends the prefill: logits + argmax partials
            S = self._native_prefill(x)
            self.mark("prefill")
            self.n_dev.fill(0)
            self.t_dev.fill(S)
            self._pick(self.logits, sampler, 0)
            return S
        logits, last = self.ort.prefill_on_device(x)  # last: offset of the last position's row
        self._ring_after_prefill()
        self.mark("prefill")
        S = self.kv.position
        self.n_dev.fill(0)
        self.t_dev.fill(S)
        self._pick(logits.array.reshape(-1)[last: last + self.vocab], sampler, 0, prefill=True)
        return S


def build(folder: ModelFolder, device, mode: str = "native", *, max_length: int | None = None, threads: int = 0,
          **options) -> NativeDecoder:
    """modes factory for "native"; options: NativeDecoder's keywords (sync_every, plan, shapes, lookahead)."""
    if mode != "native":
        raise ValueError(f"vlmdecode.native.decoder builds mode 'native', not {mode!r}")
    return NativeDecoder(folder, device, max_length=max_length, **options)
