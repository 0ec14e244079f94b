"""Shared test fixtures: fixture model folders built once per test session.

`fixture_folder(name="tiny", **overrides)` returns the folder of `preset(name, **overrides)`, building it
the first time any test asks for that exact config in this session (every test module used to build its
own copies). Folders are shared: treat them as read-only (copy with shutil.copytree to modify one); at the
end of the session every shared folder is checked against its fixture.json hashes, so a test that changed
one fails the run. `tiny_folder` is the default tiny preset (gqa, fp32, unfused).
"""

from __future__ import annotations

import pytest

from vlmdecode.fixture import build_fixture, preset
from vlmdecode.fixture.build import verify_fixture


@pytest.fixture(scope="session")
def fixture_folder(tmp_path_factory):
    built: dict = {}
    root = tmp_path_factory.mktemp("fixtures")

    def get(name: str = "tiny", **overrides):
        cfg = preset(name, **overrides)
        key = (name, tuple(sorted(overrides.items())))
        if key not in built:
            built[key] = build_fixture(cfg, root / f"{name}-{len(built)}")
        return built[key]

    yield get
    changed = {str(path): problems for path in built.values() if (problems := verify_fixture(path))}
    assert not changed, f"a test modified a shared fixture folder (copy it first): {changed}"


@pytest.fixture(scope="session")
def tiny_folder(fixture_folder):
    return fixture_folder("tiny")
