"""No GPU: ptxas's register and spill report for attention_cl's instances (issue 16: what a kernel change costs in
registers, which set how many blocks an SM holds). Writes the package's CUDA source (`native.kernels_src.SOURCE`)
with explicit instantiations of INSTANCES to a temporary .cu and compiles it with nvcc --cubin -arch=sm_90
-Xptxas -v (CCCL headers from $CCCL_INCLUDE where nvcc lacks them, as a pip-installed nvcc does); prints nvcc's
version and, per instance, ptxas's lines.
Usage: python scripts/ptxas_attention.py [REPO]   (REPO: a checkout whose vlmdecode to compile; default this one)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

INSTANCES = ("64,2,8,16,4", "256,4,8,16,4", "256,4,4,16,8", "256,4,4,16,4")  # tiny's default, batch 8 at 256,
# gemma3-1b's default (8 warps, batch 4), and the same in 4 warps (attn_threads 128)
SIG = ("const float*,int,int,const float*,const float*,float,const float*,const float*,const long long*,"
       "__half*,__half*,int,int,float,float,int,float*,int*,float*")


def main(repo: str) -> None:
    sys.path.insert(0, repo)
    from vlmdecode.native.kernels_src import SOURCE

    print(subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        for inst in INSTANCES:
            cu = Path(tmp) / "a.cu"
            cu.write_text(SOURCE + f"template __global__ void attention_cl<{inst}>({SIG});\n")
            inc = [f"-I{os.environ['CCCL_INCLUDE']}"] if os.environ.get("CCCL_INCLUDE") else []
            r = subprocess.run(["nvcc", "--cubin", "-arch=sm_90", "-std=c++17", *inc, "-Xptxas", "-v", "-o",
                                str(Path(tmp) / "a.cubin"), str(cu)], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"attention_cl<{inst}>: nvcc exit {r.returncode}:\n{r.stderr[-2000:]}")
            lines = r.stderr.splitlines()
            # ptxas reports each entry after its "Compiling entry function" line; keep attention_cl's
            at = next(i for i, line in enumerate(lines) if "attention_cl" in line and "Compiling" in line)
            report = [line.split("info    : ")[-1].strip() for line in lines[at + 1:at + 5]
                      if "Used" in line or "spill" in line]
            print(f"attention_cl<{inst}>: exit {r.returncode}; " + "; ".join(report))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1]))
