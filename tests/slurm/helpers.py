"""The test cluster from the tests' side: is it up, start it, what does slurmctld remember."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START = ROOT / "tests/slurm/start-cluster.sh"
PROFILE = ROOT / "tests/slurm/profile"
REQUIRED = os.environ.get("BENCHMARK_ILLUSION_REQUIRE_SLURM") == "1"  # set by .ci/run


def cluster_up() -> bool:
    if not shutil.which("scontrol"):
        return False
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    return "UP" in ping.stdout


def ensure_cluster() -> bool:
    """Whether a SLURM cluster answers; starts the test cluster first when running as root.
    Fails (instead of returning False) where BENCHMARK_ILLUSION_REQUIRE_SLURM=1."""
    if not cluster_up() and os.geteuid() == 0:
        subprocess.run([str(START)], capture_output=True, text=True, timeout=600)
    if cluster_up():
        return True
    if REQUIRED:
        pytest.fail(
            "BENCHMARK_ILLUSION_REQUIRE_SLURM=1 but no SLURM cluster answers "
            "(tests/slurm/start-cluster.sh)"
        )
    return False


def squeue_history() -> list[dict]:
    """Jobs slurmctld still knows (MinJobAge: an hour on the test cluster): id, partition, state,
    name, comment."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%P|%T|%j|%k"], capture_output=True, text=True
    ).stdout
    keys = ("id", "partition", "state", "name", "comment")
    return [
        dict(zip(keys, line.split("|"), strict=True))
        for line in out.splitlines()
        if line.count("|") == 4
    ]


class CancelFirstRunning(threading.Thread):
    """Waits for a running job of `rule`, then scancels it once (a node failure, as SLURM sees
    it)."""

    def __init__(self, rule: str):
        super().__init__(daemon=True)
        self.rule, self.cancelled, self.stop = rule, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for job in squeue_history():
                if job["state"] == "RUNNING" and job["comment"].startswith(
                    f"rule_{self.rule}_wildcards"
                ):
                    time.sleep(2)
                    subprocess.run(["scancel", job["id"]], check=True)
                    self.cancelled.append(job["id"])
                    return
            time.sleep(0.5)
