"""results/run.json: what the workflow's onsuccess step writes, on the hand-built metric
database of metrics/test_sql.py and rule logs in the pipeline's own format."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmark_illusion.manifest import LOADED, after_run, job_devices, summary_rows
from benchmark_illusion.models.checkpoints import where
from metrics.test_sql import _file_db, db  # noqa: F401  (db: the hand-built metric database)

ROOT = Path(__file__).resolve().parents[1]


def _log(path: Path, *lines: str) -> None:
    """A rule log as a step writes it (logs.to_file's format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger(f"manifest-test-{path}")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    for line in lines:
        logger.info(line)
    handler.close()
    logger.removeHandler(handler)


def test_where_a_job_ran_is_read_back_from_its_log_line(tmp_path):
    assert where("cpu") == f"cpu at {socket.gethostname()}"
    logs = tmp_path / "logs"
    here = where("cpu")
    _log(logs / "evaluate/m/dense/none/0/d/en.log", f"loaded resources/models/m on {here} in 1.0s")
    _log(logs / "evaluate/m/w/unstructured/0.5/d/en.log", f"loaded x on {here} in 2.0s")
    # a retried job: its log holds both attempts, the last one counts
    _log(
        logs / "prune/m/w/unstructured/0.5.log",
        "loaded m on cuda:0 (NVIDIA H100 80GB HBM3) at node3 (4 torch threads)",
        "loaded m on cuda:0 (NVIDIA H200) at node7 (4 torch threads)",
    )
    _log(logs / "aggregate.log", "built the database")  # no model: not a device
    assert job_devices(logs) == {
        "evaluate": [{"device": "cpu", "name": None, "host": socket.gethostname(), "jobs": 2}],
        "prune": [{"device": "cuda:0", "name": "NVIDIA H200", "host": "node7", "jobs": 1}],
    }
    assert LOADED.search("loaded x on cpu at h1 in 0.5s").groups() == ("cpu", None, "h1")


def test_the_manifest_describes_a_rebuilt_database_and_keeps_the_last_otherwise(
    tmp_path,
    db,  # noqa: F811  (the fixture imported above)
    monkeypatch,
):
    monkeypatch.chdir(tmp_path)
    Path("results").mkdir()
    built = _file_db(db, tmp_path)
    os.replace(built, "results/illusion.duckdb")
    _log(Path("logs/evaluate/m/d/en.log"), "loaded m on cpu at h1 in 1.0s (1 torch threads)")
    config = {"seed": 7, "models": {"m": {"source": "local", "path": "x"}}}
    started = datetime.now(UTC) - timedelta(minutes=5)

    assert after_run(config, started, ROOT) == Path("results/run.json")
    manifest = json.loads(Path("results/run.json").read_text())
    import duckdb

    con = duckdb.connect("results/illusion.duckdb", read_only=True)
    want = json.loads(json.dumps(summary_rows(con), default=str))
    con.close()
    assert manifest["checkpoints"] == want and len(want) == 2  # dense and one pruned checkpoint
    assert manifest["config"] == config
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert manifest["git"]["commit"] == (head or None)
    assert manifest["software"]["packages"]["duckdb"] == duckdb.__version__
    assert manifest["host"]["cores"] == os.cpu_count()
    assert manifest["devices"] == {
        "evaluate": [{"device": "cpu", "name": None, "host": "h1", "jobs": 1}]
    }
    assert started <= datetime.fromisoformat(manifest["finished"]) <= datetime.now(UTC)
    assert manifest["started"] == started.isoformat(timespec="seconds")

    # an invocation that did not rebuild the database leaves the manifest as it was
    before = Path("results/run.json").read_bytes()
    time.sleep(0.01)
    assert after_run(config, datetime.now(UTC) + timedelta(seconds=5), ROOT) is None
    assert Path("results/run.json").read_bytes() == before
