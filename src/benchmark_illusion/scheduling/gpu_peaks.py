"""Estimated against measured GPU memory of the model jobs of a finished run.

    python -m benchmark_illusion.scheduling.gpu_peaks WORKDIR CONFIGFILE

reads each prune, quantize, evaluate_pool and evaluate log under WORKDIR/logs (the run's
Snakemake directory) for the last "peak GPU memory <x> GiB" line the job wrote
(models.checkpoints.log_peak_gpu_memory: torch's peak of allocated memory, without the CUDA
context), and prints, per job, the GPU memory the workflow estimates for it under CONFIGFILE
(cluster.job_gpu_memory_mb at the first attempt, from the model as it is on disk under WORKDIR),
the measured peak and their ratio. benchmarks/gpu_check.sh prints it after each run.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmark_illusion.scheduling.cluster import job_gpu_memory_mb, model_shape, parameter_count

# the rules whose jobs log their peak GPU memory, and the kind of estimate each one gets
# (workflow/rules: quantize is sized as prune, evaluate_pool as evaluate)
RULES = {"prune": "prune", "quantize": "prune", "evaluate_pool": "evaluate", "evaluate": "evaluate"}
PEAK = re.compile(r"peak GPU memory ([0-9.]+) GiB")


@dataclass(frozen=True)
class JobPeak:
    job: str  # the log's path under logs/, without .log
    estimate_mb: int
    peak_mb: float | None  # None: the log has no peak (a CPU job, or one that failed first)

    @property
    def ratio(self) -> float | None:
        """Measured over estimated; None without a peak or an estimate."""
        if self.peak_mb is None or not self.estimate_mb:
            return None
        return self.peak_mb / self.estimate_mb


def logged_peak_mb(log: Path) -> float | None:
    """The last peak GPU memory `log` names, in MB (MiB, as the estimates), or None."""
    found = PEAK.findall(log.read_text(encoding="utf-8", errors="replace"))
    return float(found[-1]) * 1024 if found else None


def job_peaks(work: Path, config: dict) -> list[JobPeak]:
    """One JobPeak per log of RULES under work/logs, in the order of RULES, then by path."""
    sizes: dict[str, tuple[float, dict]] = {}
    rows = []
    for rule, kind in RULES.items():
        folder = work / "logs" / rule
        for log in sorted(folder.rglob("*.log")) if folder.is_dir() else []:
            model = log.relative_to(folder).parts[0]
            if model not in config["models"]:
                raise ValueError(
                    f"{log}: model {model!r} is not in the config's models "
                    f"({', '.join(config['models'])}); pass the config the run used"
                )
            if model not in sizes:
                cfg = config["models"][model]
                sizes[model] = (
                    parameter_count(model, cfg, work)[0],
                    model_shape(model, cfg, work)[0],
                )
            n_params, shape = sizes[model]
            rows.append(
                JobPeak(
                    str(log.relative_to(work / "logs").with_suffix("")),
                    job_gpu_memory_mb(kind, config, model, n_params, shape),
                    logged_peak_mb(log),
                )
            )
    return rows


def format_table(rows: list[JobPeak]) -> str:
    """job, estimate (MB), measured peak (MB), ratio: one line each under a header."""
    width = max([len("job"), *(len(r.job) for r in rows)])
    lines = [f"{'job':<{width}}  {'estimate MB':>11}  {'peak MB':>9}  {'ratio':>5}"]
    for r in rows:
        peak = "-" if r.peak_mb is None else f"{r.peak_mb:.0f}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"{r.job:<{width}}  {r.estimate_mb:>11d}  {peak:>9}  {ratio:>5}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmark_illusion.config.validate import load_config

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: " + __doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    work = Path(args[0])
    rows = job_peaks(work, load_config(args[1], root=work))
    if not rows:
        print(f"no prune, quantize or evaluate logs under {work / 'logs'}", file=sys.stderr)
        return 1
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
