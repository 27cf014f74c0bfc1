"""The end-to-end tests: everything in this folder is marked `e2e` (`make test-fast` leaves it
out), and `smoke_run` is the session's smoke run (tests/smoke.py), waited for by the first test
that reads it; the modules that read it run last (tests/conftest.py), each in one piece."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.common import SMOKE
from smoke import smoke_run_started

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    # started in the background when the session started (conftest.py), or now; under
    # pytest-xdist by one worker, and waited for by each
    run = smoke_run_started(tmp_path_factory)
    res = run.wait()
    SMOKE.update(
        slurm=res["slurm"], out=res["out"], cancelled=res["cancelled"], seconds=res["seconds"]
    )
    print(f"smoke run ({'SLURM' if res['slurm'] else 'local'}): {SMOKE['seconds']:.0f} s")
    assert res["returncode"] == 0, res["out"][-5000:]
    return run.work, run.cfg
