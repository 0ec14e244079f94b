"""Every results file the README, the results index and the notebooks cite is committed: a number in them is
backed by a file under data/results/ (or, named with a path, by that file; a bare name that is no results file, such
as `processor_config.json`, by a file of that name under tests/data/). Citations are backticked names ending in
.json / .csv / .txt / .xml; brace groups (`h200_x_{a,b}.{csv,json}`) expand, and a `*` pattern must match a file."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "data" / "results"
DOCS = ["README.md", "data/results/README.md",
        *sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("notebooks/*.py"), *ROOT.glob("docs/*.md")])]
CITED = re.compile(r"`([^`\s]+\.(?:json|csv|txt|xml))`")


def expand(token: str) -> list[str]:
    """`a_{x,y}.{csv,json}` -> a_x.csv, a_x.json, a_y.csv, a_y.json."""
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [t for alt in m.group(1).split(",") for t in expand(token[:m.start()] + alt + token[m.end():])]


def test_expand_brace_groups():
    assert expand("h200_{a,b}_x.{csv,json}") == ["h200_a_x.csv", "h200_a_x.json", "h200_b_x.csv", "h200_b_x.json"]
    assert expand("plain.json") == ["plain.json"]


def missing(text: str) -> list[str]:
    committed = [p.name for p in RESULTS.iterdir()]
    material = {p.name for p in (ROOT / "tests" / "data").rglob("*") if p.is_file()}
    out = []
    for token in CITED.findall(text):
        for name in expand(token):
            if "/" in name and not name.startswith("data/results/"):
                found = (ROOT / name).is_file() or any(ROOT.glob(name))
            else:
                found = (any(fnmatch.fnmatchcase(c, name.removeprefix("data/results/")) for c in committed)
                         or name in material)
            if not found:
                out.append(name)
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_cited_results_files_are_committed(doc):
    assert missing((ROOT / doc).read_text()) == []


def test_a_missing_citation_is_found():
    assert missing("see `h200_no_such_run.json` and `h200_native_bench_{tiny,nope}.csv`") == [
        "h200_no_such_run.json", "h200_native_bench_nope.csv"]
