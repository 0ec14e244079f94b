"""H200: variants of the native step A/B'd across processes. Each variant is a set of environment variables for
scripts/h200_native_replay.py (on main: NATIVE_SHAPES, Shapes overrides as JSON; a probe branch may read more, such
as -D flags for its kernel module); every process runs that script (its own decoder and kernel module: the
gemma3-1b step, context 1024, capacity 1072, 7 rounds of 200 replays) for one variant, in an order rotated each round
so that no variant always follows the same one. Two kernel modules of the same source time up to 1.3% apart within
one process (h200_native_timeline_flat8_ab_9457657.json), so a change lands on processes of its own, not on one
process's comparison. A variant whose overrides change a template instance also gets a second kernel module, loaded
after the first, while the base keeps the first: on 394d079 that alone timed 1.3-1.8% faster, whichever code the
modules held (h200_stage_q_ab_r2_394d079.json, docs/native_decoder.md). --fresh gives every variant, the base too,
NATIVE_REBUILD=fresh (its step rebuilt on a module compiled and loaded again), so they all start alike. Writes
$OUT/NAME.json: each variant's process medians, the median of them, its ratio to the first variant (the base), and
every process's replay file (with provenance), written again after each round.
Usage: OUT=/tmp/out python3 scripts/h200_ab.py NAME '{"base": {}, "x": {"NATIVE_SHAPES": {"qkv": [8, 2]}}}' [ROUNDS]
       [--fresh]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def variant_env(env: dict) -> dict[str, str]:
    """A variant's variables as the process sees them: strings as given, anything else as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in env.items()}


def summary(name: str, variants: dict[str, dict], runs: dict[str, list[dict]], rounds_done: int) -> dict:
    """The file's content after `rounds_done` rounds: each variant's process medians, their median and its ratio to
    the first variant's (the base)."""
    med = {v: statistics.median(x["replay_ms_median"] for x in runs[v]) for v in variants if runs[v]}
    base = next(iter(variants))
    return {"what": f"h200_ab.py {name}: variants across processes, rotated order, {rounds_done} rounds",
            "variants": variants, "median_of_process_medians_ms": med,
            "vs_base": {v: med[v] / med[base] for v in med} if base in med else {}, "runs": runs}


def main(name: str, variants: dict[str, dict], rounds: int = 3, replay: Path = HERE / "h200_native_replay.py") -> None:
    """Every round's processes, the file written again after each round (a call cut short keeps the rounds done)."""
    out = Path(os.environ["OUT"])
    out.mkdir(parents=True, exist_ok=True)
    names = list(variants)
    runs: dict[str, list[dict]] = {v: [] for v in names}
    done = summary(name, variants, runs, 0)
    for r in range(rounds):
        for v in names[r % len(names):] + names[:r % len(names)]:
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, OUT=tmp, **variant_env(variants[v]))
                p = subprocess.run([sys.executable, str(replay)], env=env, capture_output=True, text=True,
                                   timeout=240)
                f = Path(tmp) / "h200_native_replay.json"
                if p.returncode or not f.exists():
                    print(f"{v} round {r}: failed (rc {p.returncode}): {p.stderr[-600:]}", flush=True)
                    continue
                res = json.loads(f.read_text())
            res["round"], res["env"] = r, variants[v]
            runs[v].append(res)
            print(f"{v} round {r}: {res['replay_ms_median']:.4f} ms", flush=True)
        done = summary(name, variants, runs, r + 1)
        (out / f"{name}.json").write_text(json.dumps(done, indent=1, default=str))
    print(json.dumps({k: done[k] for k in ("median_of_process_medians_ms", "vs_base")}), flush=True)


def parse_args(argv: list[str]) -> tuple[str, dict[str, dict], int]:
    """NAME, the variants (with --fresh: each given NATIVE_REBUILD=fresh unless it names its own) and ROUNDS."""
    fresh = "--fresh" in argv
    argv = [a for a in argv if a != "--fresh"]
    if len(argv) not in (2, 3):
        raise SystemExit(__doc__)
    variants = json.loads(argv[1])
    if fresh:
        variants = {v: {"NATIVE_REBUILD": "fresh", **env} for v, env in variants.items()}
    return argv[0], variants, int(argv[2]) if len(argv) > 2 else 3


if __name__ == "__main__":
    main(*parse_args(sys.argv[1:]))
