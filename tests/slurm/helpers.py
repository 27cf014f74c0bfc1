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
# CI's explicit decision not to run SLURM here, with its reason (.ci/run, docs/cluster.md)
SKIPPED = os.environ.get("BENCHMARK_ILLUSION_SKIP_SLURM", "")


def cluster_up() -> bool:
    if not shutil.which("scontrol"):
        return False
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    return "UP" in ping.stdout


def ensure_cluster() -> bool:
    """Whether a SLURM cluster answers; starts the test cluster first when running as root.
    Fails (instead of returning False) where BENCHMARK_ILLUSION_REQUIRE_SLURM=1; returns False
    without trying where BENCHMARK_ILLUSION_SKIP_SLURM gives a reason."""
    if SKIPPED and not REQUIRED:
        return False
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


def skip_reason() -> str:
    """Why a SLURM test skips: CI's stated reason, or no cluster here."""
    if SKIPPED:
        return f"SLURM skipped on purpose (BENCHMARK_ILLUSION_SKIP_SLURM): {SKIPPED}"
    return "no SLURM cluster: the smoke run ran locally"


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
    """Waits for a running job of `rule` whose rule log under `work`/logs/ shows its first
    progress bar at 100% (its model is loaded and its evaluation under way, with more phases to
    go), then scancels it once: a node failure, as SLURM sees it. The job is found by its
    comment, `rule_<rule>_wildcards_<wildcard values joined by _>`, which the executor plugin
    builds from the same wildcards as the log's path."""

    def __init__(self, rule: str, work: Path):
        super().__init__(daemon=True)
        self.rule, self.work, self.cancelled, self.stop = rule, work, [], threading.Event()

    def under_way(self) -> set[str]:
        """The comments of the jobs whose log shows a finished progress bar."""
        logs = self.work / "logs" / self.rule
        out = set()
        for log in logs.rglob("*.log") if logs.is_dir() else []:
            if "100%|" in log.read_text(errors="replace"):
                wildcards = "_".join(log.relative_to(logs).with_suffix("").parts)
                out.add(f"rule_{self.rule}_wildcards_{wildcards}")
        return out

    def run(self) -> None:
        while not self.stop.is_set():
            running = {
                job["comment"]: job["id"] for job in squeue_history() if job["state"] == "RUNNING"
            }
            for comment in sorted(self.under_way() & set(running)):
                subprocess.run(["scancel", running[comment]], check=True)
                self.cancelled.append(running[comment])
                return
            time.sleep(0.2)
