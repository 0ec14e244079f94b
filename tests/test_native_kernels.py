"""Host side of the native kernels, no GPU needed: weight layout, launch geometry, refusals, and (where an nvcc is
installed: `cuda_compile`) that the CUDA source compiles for sm_90 without stack frames or register spills, within
the register budgets the step's occupancy needs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from cuda_compile import compile_sm90, needs_nvcc

from vlmdecode.native import kernels as K
from vlmdecode.native.kernels_src import SOURCE
from vlmdecode.native.shapes import MAX_AUTO_CLUSTERS, Shapes, attention_blocks


def test_rows_layout_is_the_transpose_contiguous():
    w = np.arange(24 * 5, dtype=np.float16).reshape(24, 5)  # [in, out]
    r = K.rows_layout(w)
    assert r.shape == (5, 24) and r.flags.c_contiguous and np.array_equal(r, w.T)
    with pytest.raises(K.KernelShapeError, match="multiple of 8"):
        K.rows_layout(np.zeros((12, 3), np.float16))
    with pytest.raises(K.KernelShapeError, match="2-D"):
        K.rows_layout(np.zeros(8, np.float16))


def test_split_k_and_loads_per_lane():
    assert K.split_k(6912) == 8 and 6912 // 8 == 864  # gemma3-1b's down projection at the default target
    assert K.split_k(6912, 1280) == 6 and K.split_k(1152, 1280) == 1 and K.split_k(128) == 1
    assert K.split_k(2560, 1280) == 2 and K.split_k(8) == 1
    assert [K.loads_per_lane(n) for n in (8, 256, 264, 1152, 2048)] == [1, 1, 2, 5, 8]
    for bad in (12, 2056):
        with pytest.raises(K.KernelShapeError):
            K.loads_per_lane(bad)
    with pytest.raises(K.KernelShapeError):
        K.split_k(100)


def test_shapes_name_each_step_gemvs_block_shape_and_instance():
    sh = Shapes()  # qkv (8, 1): PF 1 when the shape names none; gate_up (8, 2, 3); down (4, 1, 2)
    assert sh.gemv("qkv") == dict(warps=8, rpw=1, prefetch_weights=1)
    assert sh.gemv("gate_up") == dict(warps=8, rpw=2, prefetch_weights=3)
    assert Shapes.for_model(256, 1152).gate_up == (8, 2, 3) and Shapes.for_model(256, 2560).gate_up == (8, 2, 0)
    # gate|up as gemv_tiled where the weights tile by R 4 (a row of a multiple of 64, <= 8 x 256), else the gemv's
    assert Shapes.for_model(256, 1152, 6912).gate_up_tiled == (16, 8, 0)
    assert Shapes.for_model(256, 1152).gate_up_tiled == ()
    assert Shapes.for_model(256, 1160, 6912).gate_up_tiled == () and Shapes.for_model(256, 2560, 64).gate_up_tiled == ()
    # down's slices where the hidden size tiles by R 16 and a slice (6912 / 8 = 864) by 16
    assert Shapes.for_model(256, 1152, 6912).down_tiled == (16, 8, 0) and Shapes.for_model(256, 1152).down_tiled == ()
    assert Shapes.for_model(256, 1160, 6912).down_tiled == () and Shapes.for_model(256, 1152, 6904).down_tiled == ()
    # qkv (its fold) and o where the head counts are given, the rows tile by R 16 and qkv's fold fits 16 warps' one
    # slot a thread (4 x 32 x 16 = 2048 elements): gemma3-1b's (4 q heads, 1 kv head of 256), not a hidden of 2560
    g1b = Shapes.for_model(256, 1152, 6912, 4, 1)
    assert (g1b.qkv_tiled, g1b.o_tiled) == ((16, 16, 0), (16, 8, 0))
    assert Shapes.for_model(256, 1152, 6912).qkv_tiled == () and Shapes.for_model(256, 1152, 6912).o_tiled == ()
    wide = Shapes.for_model(256, 2560, 10240, 8, 4)
    assert (wide.qkv_tiled, wide.o_tiled) == ((), (16, 8, 0))
    assert Shapes.for_model(256, 1160, 6912, 4, 1).qkv_tiled == () and Shapes.for_model(8, 1152, 0, 3, 1).o_tiled == ()
    assert sh.gemv("down") == dict(warps=4, rpw=1, prefetch_weights=2)
    # gemma3-1b: hidden 1152 (5 loads a lane), q 1024 (4), down's slice 864 (4); qkv and head share nv 5
    got = sh.gemv_instances({"qkv": 1152, "o": 1024, "gate_up": 1152, "down": 864, "head": 1152})
    assert got == {(5, 1, K.EPI_PLAIN, 1), (4, 1, K.EPI_PLAIN, 1), (5, 2, K.EPI_GELU, 3), (4, 1, K.EPI_PLAIN, 2),
                   (5, 2, K.EPI_HEAD, 0)}
    assert Shapes(o=(8, 2, 2)).gemv_instances({"o": 1024}) == {(4, 2, K.EPI_PLAIN, 2)}
    capped = Shapes(gate_up=(8, 2, 3, 288))  # a fourth element caps the grid; the instance is the same
    assert capped.gemv("gate_up") == dict(warps=8, rpw=2, prefetch_weights=3, max_blocks=288)
    assert capped.gemv_instances({"gate_up": 1152}) == {(5, 2, K.EPI_GELU, 3)}


def test_gemv_grid_cap_refused_for_the_head_and_below_zero():
    W = np.zeros((64, 128), np.float16)  # refused before any kernel is looked up: no module needed
    with pytest.raises(K.KernelShapeError, match="max_blocks caps a step GEMV's grid.*not the LM head's, got 4"):
        K.gemv({}, "head", W, 64, 128, epi=K.EPI_HEAD, max_blocks=4)
    with pytest.raises(K.KernelShapeError, match="got -1"):
        K.gemv({}, "o", W, 64, 128, max_blocks=-1)


def test_shapes_with_overrides_from_json():
    base = Shapes.for_head_dim(256)
    got = base.with_overrides(json.loads('{"qkv": [8, 2], "attn_threads": 128}'))
    assert got.qkv == (8, 2) and got.attn_threads == 128 and got.attn_batch == base.attn_batch == 4
    assert got.gemv("qkv") == dict(warps=8, rpw=2, prefetch_weights=1) and base.qkv == (8, 1)
    assert base.with_overrides({}) == base
    with pytest.raises(K.KernelShapeError, match=r"unknown Shapes fields \['qvk'\].*'qkv'"):
        base.with_overrides({"qvk": [8, 2]})


def test_attention_geometry():
    assert K.attention_layout(256) == (1, 32) and K.attention_layout(16) == (1, 2)
    assert K.attention_layout(512) == (2, 32) and K.attention_layout(64) == (1, 8)
    for bad in (24, 96, 300):
        with pytest.raises(K.KernelShapeError, match="head_dim"):
            K.attention_layout(bad)
    assert K.attention_splits(1072, None) == 67 and K.attention_splits(1072, 512) == 32
    assert K.attention_splits(256, 16) == 1 and K.attention_splits(10, 512) == 1


def test_cluster_attention_geometry():
    assert K.split_units(256, 256) == 8 and K.split_units(16, 64) == 32
    # the fewest clusters with one batch a sub-group at the most keys: 1072 keys / (8 blocks x 8 x 2) -> 9
    assert K.cluster_splits(1072, None, 256, 256, 2, 8) == 72 and K.cluster_splits(1072, 512, 256, 256, 8, 8) == 8
    assert K.cluster_splits(1072, None, 256, 256, 8, 8, clusters=1) == 8
    assert K.cluster_name(256, 4, 2, 8, 8) == "attention_cl<256,4,2,8,8>"
    sh = Shapes(attn_batch=4, attn_cluster=4, attn_clusters=0, attn_threads=256)
    assert attention_blocks(sh, 1072, 512, 256) == 16
    assert attention_blocks(Shapes(attn_batch=8, attn_cluster=8, attn_clusters=0, attn_threads=256), 1072, 512,
                            256) == 8
    assert attention_blocks(Shapes(attn_batch=0, attn_threads=256), 1072, 512, 256) == 32
    assert attention_blocks(Shapes(), 1072, 512, 256) == 16  # the default: one cluster of 16 a KV head
    # more clusters on the layers with no window only (0: attn_clusters on every layer)
    glob = Shapes(attn_batch=4, attn_threads=256, attn_clusters_global=4)
    assert glob.clusters_for(None, 1072) == 4 and glob.clusters_for(512, 1072) == 1
    assert Shapes().clusters_for(None, 4144) == 1
    assert attention_blocks(glob, 4144, None, 256) == 64 and attention_blocks(glob, 4144, 512, 256) == 16
    # "auto": as many clusters as the capacity needs at attn_cluster_keys keys a cluster, at most MAX_AUTO_CLUSTERS
    auto = Shapes(attn_batch=4, attn_threads=256, attn_clusters_global="auto")
    assert [auto.clusters_for(None, c) for c in (1072, 2048, 2049, 4144, 1 << 20)] == [1, 1, 2, 3, MAX_AUTO_CLUSTERS]
    assert auto.clusters_for(512, 4144) == 1 and attention_blocks(auto, 4144, None, 256) == 48
    assert Shapes(attn_clusters_global="auto", attn_cluster_keys=1024).clusters_for(None, 4144) == 5
    assert Shapes().with_overrides({"attn_clusters_global": "auto"}).attn_clusters_global == "auto"
    for bad in (dict(attn_clusters_global="all"), dict(attn_clusters_global=-1), dict(attn_cluster_keys=-5),
                dict(attn_clusters_global="auto", attn_cluster_keys=0)):
        with pytest.raises(K.KernelShapeError, match="attn_cluster"):
            Shapes(**bad)
    # head_dim 256 (a sub-group = a warp): 8 warps, batches of 4; smaller head dims: the class defaults
    assert Shapes.for_head_dim(256) == Shapes(attn_threads=256, attn_batch=4, attn_clusters_global="auto")
    assert Shapes.for_head_dim(512) == Shapes.for_head_dim(256)
    assert Shapes.for_head_dim(64) == Shapes.for_head_dim(16) == Shapes()
    assert attention_blocks(Shapes.for_head_dim(256), 1072, 512, 256) == 16
    assert K.cluster_splits(1072, 512, 256, 512, 1, 16) == 32  # 16 warps a block, one key a batch
    for bad in (dict(batch=3, cluster=8), dict(batch=2, cluster=32), dict(batch=2, cluster=8, threads=544),
                dict(batch=2, cluster=8, threads=1024)):
        with pytest.raises(K.KernelShapeError):
            K.cluster_splits(1072, None, 256, bad.pop("threads", 256), bad["batch"], bad["cluster"])


def test_cluster_attention_refuses_head_dim_8():
    """A lane of attention_cl holds 8 dims, so at head_dim 8 both rotary halves sit in one lane: refused, naming
    the chunked kernel, which takes it."""
    kv = np.zeros((1, 32, 8), np.float16)
    args = dict(q_norm=None, k_norm=None, eps=1e-6, rope_cos=None, rope_sin=None, pos=None, K=kv, V=kv, window=None,
                scale=1.0, softcap=None, part=None, counter=None, out=None)
    with pytest.raises(K.KernelShapeError, match="head_dim >= 16, got 8; attn_batch=0"):
        K.attention({}, "L0.attn", None, 2, 1, 8, batch=8, cluster=16, clusters=1, **args)
    with pytest.raises(K.KernelShapeError, match="head_dim >= 16, got 8"):
        K.cluster_splits(32, None, 8, 256, 8, 16)
    assert K.cluster_splits(32, None, 16, 256, 8, 16, clusters=1) == 16


def test_kernel_names():
    assert K.gemv_name(5, 2, K.EPI_GELU) == "gemv<5,2,1,1>" and K.attention_name(256) == "attention<256>"
    assert K.gemv_name(5, 2, K.EPI_GELU, 0) == "gemv<5,2,1,0>" and K.gemv_name(1, 4, K.EPI_HEAD, 2) == "gemv<1,4,2,2>"
    assert K.gemv_name(5, 2, K.EPI_GELU, 3) == "gemv_split<5,2>"  # PF 3: gate|up only
    with pytest.raises(K.KernelShapeError, match="0, 1 or 2"):
        K.gemv_name(5, 2, K.EPI_PLAIN, 3)


# gemv<NV, RPW, EPI, PF>'s parameter types (cuda_src.gemv), for explicit instantiations
GEMV_SIG = ("const __half*,int,int,int,const float*,const __half*,float,const float*,int,const float*,float*,"
            "const float*,float,float*,__half*,float,float*,long long*,const long long*,const int*")
# attention / attention_cl's parameter types (cuda_src.attention, attn_split)
ATT_SIG = ("const float*,int,int,const float*,const float*,float,const float*,const float*,const long long*,"
           "__half*,__half*,int,int,float,float,int,float*,int*,float*")


@needs_nvcc
def test_source_compiles_for_sm90_without_spills(tmp_path):
    shapes = [(5, 2, 0), (4, 2, 0), (5, 2, 1), (5, 4, 2), (1, 2, 0), (1, 2, 1), (1, 4, 2), (5, 4, 1)]
    inst = [f"template __global__ void gemv<{nv},{rpw},{epi},1>({GEMV_SIG});" for nv, rpw, epi in shapes]
    inst += [f"template __global__ void gemv<{nv},{rpw},{epi},0>({GEMV_SIG});" for nv, rpw, epi in shapes[:3]]
    inst += [f"template __global__ void gemv<{nv},{rpw},{epi},2>({GEMV_SIG});" for nv, rpw, epi in shapes[:4]]
    inst += [f"template __global__ void attention<{d}>({ATT_SIG});" for d in (16, 256)]
    cl = ((256, 4, 2, 8, 8), (256, 4, 8, 8, 8), (256, 4, 4, 1, 8), (16, 2, 2, 8, 2), (64, 4, 4, 2, 4),
          (512, 2, 4, 4, 8), (128, 3, 4, 8, 4), (256, 4, 8, 16, 4), (256, 4, 4, 16, 8), (256, 4, 1, 16, 16))
    inst += [f"template __global__ void attention_cl<{d},{g},{kb},{c},{nw}>({ATT_SIG});" for d, g, kb, c, nw in cl]
    r = compile_sm90(SOURCE + "\n".join(inst) + "\n", tmp_path)
    assert r.ok, r.log[-3000:]
    fns = re.findall(r"Function properties for (\S+)\n\s*(?:ptxas info\s*:\s*)?(.*)", r.log)
    assert len(fns) == 28, r.log[-3000:]  # 15 gemv, 2 attention, 10 attention_cl, advance
    for name, props in fns:
        assert "0 bytes stack frame, 0 bytes spill stores" in props, (name, props)


@needs_nvcc
def test_stamped_source_compiles_and_only_with_the_define(tmp_path):
    """-DVLM_STAMPS (scripts/h200_native_timeline.py) adds a last `stamps` parameter to gemv and attention_cl and
    reads %globaltimer; without the define no kernel reads the timer."""
    for define, extra in ((True, ",unsigned long long*"), (False, "")):
        inst = [f"template __global__ void gemv<5,2,1,0>({GEMV_SIG}{extra});",
                f"template __global__ void attention_cl<256,4,8,16,4>({ATT_SIG}{extra});"]
        r = compile_sm90(SOURCE + "\n".join(inst) + "\n", tmp_path, ptx=True,
                         defines=("VLM_STAMPS",) if define else ())
        assert r.ok, r.log[-3000:]
        assert ("%globaltimer" in r.ptx) == define


@needs_nvcc
def test_prefill_source_compiles_for_sm90_without_spills(tmp_path):
    from vlmdecode.native.cuda_src import common, prefill

    r = compile_sm90(common.CODE + prefill.CODE, tmp_path)
    assert r.ok, r.log[-3000:]
    fns = dict(re.findall(r"Function properties for (\S+)\n\s*(?:ptxas info\s*:\s*)?(.*)", r.log))
    assert set(fns) == {"pf_embed", "pf_fold", "pf_qk", "pf_softmax", "pf_gelu", "pf_last"}, r.log[-3000:]
    for name, props in fns.items():
        assert "0 bytes stack frame, 0 bytes spill stores" in props, (name, props)


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("cuobjdump") is None, reason="no nvcc / cuobjdump")
def test_attention_reads_nothing_through_the_read_only_path_before_the_pdl_wait(tmp_path):
    """In the machine code, no attention kernel loads through the non-coherent read-only path (LDG.CONSTANT)
    before its dependency wait (ACQBULK = griddepcontrol.wait): ptxas hoisted such loads of qkv, which the
    previous kernel writes, above the wait in the first attention_cl, so under PDL it read the previous layer's."""
    inst = [f"template __global__ void attention<{d}>({ATT_SIG});" for d in (16, 256)]
    inst += [f"template __global__ void attention_cl<{d},{g},{kb},{c},{nw}>({ATT_SIG});"
             for d, g, kb, c, nw in ((16, 2, 8, 8, 8), (256, 4, 8, 16, 4), (256, 4, 2, 8, 8))]
    src = tmp_path / "attn.cu"
    src.write_text(SOURCE + "\n".join(inst) + "\n")
    r = subprocess.run(["nvcc", "--cubin", "-arch=sm_90", "-o", str(tmp_path / "a.cubin"), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    sass = subprocess.run(["cuobjdump", "-sass", str(tmp_path / "a.cubin")], capture_output=True, text=True,
                          timeout=120).stdout
    funcs = [f for f in re.split(r"\n\s*Function : ", sass)[1:] if "attention" in f.split()[0]]
    assert len(funcs) == 5
    for f in funcs:
        lines = f.splitlines()
        wait = next(i for i, line in enumerate(lines) if "ACQBULK" in line)
        assert not [line for line in lines[:wait] if "CONSTANT" in line], lines[0]


@needs_nvcc
def test_step_gemv_registers_at_gemma3_1b(tmp_path):
    """gemma3-1b's step GEMV instances compile without spills, gate|up (gemv_split, the default, and PF 0) within the
    80 registers that keep three of its 256-thread blocks on an SM, qkv (whose fold_flat8 holds every load of its
    fold at once) within the 128 that keep two; gemv_tiled: gate|up at R 16 (the default, `TILED_GATE_UP`) within 128
    too, at R 4 within 80 (MB 4 within the 64 that keep four), down's slices at R 16 (`Shapes.down_tiled`) and o's
    at R 8 (`Shapes.o_tiled`) within 80, o's at R 16 within 128, and qkv's fold at R 16 and 16 warps
    (`Shapes.qkv_tiled`) within the 128 that keep one 512-thread block an SM (its 96 tiles are fewer than the SMs)."""
    inst = ("5,1,0,1", "4,1,0,1", "5,2,1,0", "4,1,0,2", "5,2,2,0")  # qkv, o, gate|up PF 0, down, head
    tiled = ("3,4,8,4,1", "3,4,8,0,1", "9,16,8,0,1", "7,16,8,0,0", "4,8,8,0,0", "8,16,8,0,0", "5,16,16,0,3")
    r = compile_sm90(SOURCE + "".join(f"template __global__ void gemv<{a}>({GEMV_SIG});\n" for a in inst)
                     + f"template __global__ void gemv_split<5,2>({GEMV_SIG});\n"
                     + "".join(f"template __global__ void gemv_tiled<{a}>({GEMV_SIG});\n" for a in tiled), tmp_path)
    assert r.ok, r.log[-3000:]
    props = {n: p for n, p in re.findall(r"Function properties for (\S+)\n\s*(?:ptxas info\s*:\s*)?(.*)", r.log)
             if "gemv" in n}
    assert len(props) == 13 and all("0 bytes spill stores" in p for p in props.values()), props
    regs = {n: int(v) for n, v in re.findall(r"Function properties for (\S+)\n[^\n]*\n[^\n]*Used (\d+) registers",
                                             r.log)}
    assert regs[next(n for n in regs if n.startswith("_Z4gemvILi5ELi2ELi1ELi0E"))] <= 80, regs
    assert regs[next(n for n in regs if n.startswith("_Z10gemv_splitILi5ELi2E"))] <= 80, regs
    assert regs[next(n for n in regs if n.startswith("_Z10gemv_tiledILi3ELi4ELi8ELi4E"))] <= 64, regs
    assert regs[next(n for n in regs if n.startswith("_Z10gemv_tiledILi3ELi4ELi8ELi0E"))] <= 80, regs
    assert regs[next(n for n in regs if n.startswith("_Z10gemv_tiledILi9ELi16ELi8ELi0ELi1E"))] <= 128, regs
    assert regs[next(n for n in regs if n.startswith("_Z10gemv_tiledILi8ELi16ELi8ELi0ELi0E"))] <= 128, regs
    assert regs[next(n for n in regs if n.startswith("_Z10gemv_tiledILi5ELi16ELi16ELi0ELi3E"))] <= 128, regs
    assert regs[next(n for n in regs if n.startswith("_Z10gemv_tiledILi7ELi16ELi8ELi0ELi0E"))] <= 80, regs
    assert regs[next(n for n in regs if n.startswith("_Z10gemv_tiledILi4ELi8ELi8ELi0ELi0E"))] <= 80, regs
    assert regs[next(n for n in regs if n.startswith("_Z4gemvILi5ELi1ELi0ELi1E"))] <= 128, regs
