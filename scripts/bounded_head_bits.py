"""CPU, numpy: how many rows the bounded LM head would compute exactly if its copy had fewer bits. gemma3-1b's head
shape (262144 x 1152) with random fp16 weights like the fixture's, x random (RMS 1, with and without three outlier
elements). For b bits a row is quantised to [-(2^(b-1) - 1), 2^(b-1) - 1] with one scale, its bound built as
`native.bounded_head.quantise` builds it (c_r, d_r) and the pass-2 rule applied (no softcap). b = 8 is the decoder's
table itself. Prints and writes data/results/bounded_head_bits_cpu.json (or --out).
Usage: python scripts/bounded_head_bits.py [--rows 262144] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def table(W: np.ndarray, bits: int):
    """A b-bit copy's BoundTable: the decoder's own at 8 bits, else `bounded_head.row_bounds` at qmax = 2^(b-1) - 1
    (the values as int8, unpacked: bounded_head.estimate reads them as they are)."""
    from vlmdecode.native import bounded_head as BH

    if bits == 8:
        return BH.quantise(W)
    parts = [BH.row_bounds(W[r0: r0 + 4096], 2 ** (bits - 1) - 1) for r0 in range(0, len(W), 4096)]
    sc = np.concatenate([p[1] for p in parts])
    return BH.BoundTable(np.concatenate([p[0] for p in parts]), np.concatenate([sc, 0 * sc[:, :1]], axis=1))


def main() -> None:
    from vlmdecode.native import bounded_head as BH

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=262144)
    ap.add_argument("--out", default=str(ROOT / "data" / "results" / "bounded_head_bits_cpu.json"))
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    V, H = a.rows, 1152
    W = (rng.standard_normal((V, H)) * 0.03).astype(np.float16)
    xs = {}
    for name, outliers in (("random", False), ("random + 3 outliers x40", True)):
        x = rng.standard_normal(H).astype(np.float32)
        if outliers:
            x[rng.integers(0, H, 3)] *= 40
        xs[name] = x / np.float32(np.sqrt((x * x).mean()))
    z = {n: W.astype(np.float32) @ x for n, x in xs.items()}
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": " ".join(sys.argv),
           "git_sha": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip(),
           "numpy": np.__version__, "shape": [V, H], "weights": "standard normal x 0.03, fp16 (seed 0)",
           "bits": {}}
    for bits in (8, 7, 6, 5):
        t = table(W, bits)
        row = {"copy_bytes_per_row": H * bits / 8 + 16, "candidates": {}, "bound_over_logit_sd": {}}
        for n, x in xs.items():
            est, e = BH.estimate(t, x)
            cand = BH.candidates(est + e, np.max(est - e))
            assert cand[int(np.argmax(z[n].astype(np.float16).astype(np.float32)))], "the winner must be a candidate"
            row["candidates"][n] = int(cand.sum())
            row["bound_over_logit_sd"][n] = float(e.mean() / z[n].std())
        out["bits"][str(bits)] = row
        print(bits, row, flush=True)
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
