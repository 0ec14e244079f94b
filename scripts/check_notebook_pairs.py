"""CI check: every notebooks/*.ipynb and its jupytext-paired .py hold the same cells (type and source).

Run from the repository root: `python scripts/check_notebook_pairs.py`. Exit 1 names the first cell that
differs in each unsynced pair (fix: `jupytext --sync notebooks/NN_x.ipynb`, then re-execute the notebook).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext


def cells(path: Path) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in jupytext.read(path).cells]


def main(root: Path = Path("notebooks")) -> int:
    problems = []
    notebooks = sorted(root.glob("*.ipynb"))
    for py in sorted(root.glob("*.py")):
        if not py.with_suffix(".ipynb").is_file():
            problems.append(f"{py}: no paired .ipynb")
    for nb in notebooks:
        py = nb.with_suffix(".py")
        if not py.is_file():
            problems.append(f"{nb}: no paired {py.name}")
            continue
        a, b = cells(nb), cells(py)
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            problems.append(f"{nb} and {py.name} differ at cell {i} ({len(a)} vs {len(b)} cells)")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"notebook pairs: {len(notebooks)} checked, {len(problems)} problem(s)")
    return 1 if problems or not notebooks else 0


if __name__ == "__main__":
    raise SystemExit(main())
