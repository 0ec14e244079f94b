"""The committed notebooks as files: paired .py and .ipynb agree, a clean open or save changes nothing, output
checks are skipped only where the output cannot repeat, and every figure has a caption. (nbval runs them.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _cells(nb):
    return [(c.cell_type, c.source, tuple(c.metadata.get("tags", ()))) for c in nb.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_pairing_and_pinned_metadata(path):
    nb, py = jupytext.read(path), path.with_suffix(".py")
    assert py.is_file() and _cells(jupytext.read(py)) == _cells(nb)  # the pair holds the same cells
    # ipykernel's own kernelspec: JupyterLab rewrites any other display name on open (the notebook turns modified)
    assert nb.metadata["kernelspec"] == KERNELSPEC
    # saving the notebook (jupytext writes the .py from it) reproduces the committed .py byte for byte
    assert jupytext.writes(nb, fmt="py:percent") == py.read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_output_checks_skipped_only_with_a_reason(path):
    code = [c for c in jupytext.read(path).cells if c.cell_type == "code"]
    for c in code:
        if "nbval-ignore-output" in c.metadata.get("tags", ()):
            first = c.source.splitlines()[0]
            assert re.match(r"# (timings|depends on the machine)\b", first), f"ignored without a reason: {first!r}"
        else:
            assert "NBVAL_IGNORE_OUTPUT" not in c.source and "NBVAL_SKIP" not in c.source
    ignored = sum("nbval-ignore-output" in c.metadata.get("tags", ()) for c in code)
    assert ignored <= 2 and ignored < len(code) / 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_has_a_caption(path):
    cells = jupytext.read(path).cells
    for i, c in enumerate(cells):
        if c.cell_type == "code" and re.search(r"\bplots(_native)?\.plot_", c.source):  # vlmdecode.plots*
            assert i and cells[i - 1].cell_type == "markdown", f"figure without a caption: {c.source[:60]!r}"
