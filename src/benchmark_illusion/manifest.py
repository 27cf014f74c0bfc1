"""The run manifest, results/run.json: what a run was and what it found, in one file.

Written by the workflow (Snakefile, `onsuccess`) whenever the invocation rebuilt the metric
database, so that the manifest always describes the database beside it:

  config       the configuration as resolved (every default filled in, overlays merged)
  software     Python, the platform, and the versions of the packages that decide the numbers
  git          the workflow's commit and whether its tree had uncommitted changes
  host         where Snakemake ran: host name, CPU, cores, memory
  devices      where the model jobs ran, read from their rule logs ("loaded ... on <device>"):
               per rule, the devices and hosts with the number of jobs on each
  started, finished  the invocation's start (when Snakemake read the Snakefile) and end, UTC
  checkpoints  the headline numbers per checkpoint, languages pooled: the rows of
               `python -m benchmark_illusion summary --json`

The headline rows are those of the `report_summary` view (workflow/sql/90_report.sql).
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from benchmark_illusion.io import atomic_path

# Every report is a view of the database: the commands and the manifest only choose rows.
SUMMARY_SQL = (
    "SELECT * EXCLUDE (dataset, lang) FROM report_summary WHERE lang = 'all' "
    "ORDER BY model, method, structure, sparsity"
)
SUMMARY_BY_LANG_SQL = (
    "SELECT * FROM report_summary WHERE lang <> 'all' "
    "ORDER BY model, method, structure, sparsity, dataset, lang"
)

PACKAGES = (
    "benchmark-illusion",
    "torch",
    "transformers",
    "accelerate",
    "safetensors",
    "gguf",
    "compressed-tensors",
    "snakemake",
    "snakemake-executor-plugin-slurm",
    "duckdb",
    "polars",
    "numpy",
    "scipy",
)

# the model steps' log line when a job has loaded its checkpoint (evaluation/steps.py,
# compression/steps.py)
LOADED = re.compile(r"loaded \S+ on (\S+?)(?: \(([^)]*)\))? at (\S+)")


def summary_sql(con, by_lang: bool = False) -> str:
    """The summary query; without a quantized checkpoint its `bits` column (all NULL) is left
    out."""
    sql = SUMMARY_BY_LANG_SQL if by_lang else SUMMARY_SQL
    columns = con.sql("SELECT * FROM report_summary LIMIT 0").columns
    if (
        "bits" in columns
        and not con.execute("SELECT count(bits) FROM report_summary").fetchall()[0][0]
    ):
        sql = sql.replace("SELECT * EXCLUDE (", "SELECT * EXCLUDE (bits, ").replace(
            "SELECT * FROM", "SELECT * EXCLUDE (bits) FROM"
        )
    return sql


def summary_rows(con, by_lang: bool = False) -> list[dict]:
    """The summary's rows as JSON-ready dicts (column name -> value)."""
    rel = con.sql(summary_sql(con, by_lang))
    return [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]


def package_versions() -> dict[str, str | None]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state(folder: Path) -> dict:
    """The commit of the repository holding `folder` and whether it has uncommitted changes;
    nulls outside a git checkout."""

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(
                ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def host_facts() -> dict:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory_gb = None
    return {
        "hostname": socket.gethostname(),
        "machine": platform.machine(),
        "cpu": cpu or platform.processor() or None,
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
    }


def job_devices(logs: Path) -> dict[str, list[dict]]:
    """Per rule, where its model jobs ran: [{device, name, host, jobs}] from the rule logs under
    `logs` (the last "loaded" line of each log: a retried job's log holds every attempt)."""
    seen: dict[str, Counter] = {}
    for log in sorted(logs.rglob("*.log")) if logs.is_dir() else []:
        try:
            hits = LOADED.findall(log.read_text(errors="replace"))
        except OSError:
            continue
        if hits:
            rule = log.relative_to(logs).parts[0]
            seen.setdefault(rule, Counter())[hits[-1]] += 1
    return {
        rule: [
            {"device": d, "name": name or None, "host": host, "jobs": n}
            for (d, name, host), n in sorted(counts.items())
        ]
        for rule, counts in sorted(seen.items())
    }


def build_manifest(
    config: dict, db: Path, logs: Path, workflow_dir: Path, started: datetime
) -> dict:
    """The manifest of a run whose metric database is `db` (read-only)."""
    import duckdb

    from benchmark_illusion.metrics.dbfile import for_reading

    path, _ = for_reading(db)
    con = duckdb.connect(str(path), read_only=True)
    try:
        checkpoints = summary_rows(con)
    finally:
        con.close()
    return {
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": str(db),
        "config": config,
        "software": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "packages": package_versions(),
        },
        "git": git_state(workflow_dir),
        "host": host_facts(),
        "devices": job_devices(logs),
        "checkpoints": checkpoints,
    }


def write_manifest(
    out: Path, config: dict, db: Path, logs: Path, workflow_dir: Path, started: datetime
) -> dict:
    """Build the manifest and write it atomically to `out` (JSON, 2-space indent)."""
    manifest = build_manifest(config, db, logs, workflow_dir, started)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out, ".json") as tmp:
        Path(tmp).write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    return manifest


def after_run(config: dict, started: datetime, workflow_dir: Path) -> Path | None:
    """The workflow's `onsuccess` step: write results/run.json when this invocation rebuilt
    results/illusion.duckdb (an invocation that ran other jobs only, such as a `--until` or a
    single target, leaves the manifest of the database as it was). Returns the manifest's path,
    or None when nothing was written; a failure is reported, never raised: the run's results
    are complete either way."""
    db, out = Path("results/illusion.duckdb"), Path("results/run.json")
    try:
        if not db.is_file() or datetime.fromtimestamp(db.stat().st_mtime, UTC) < started:
            return None
        write_manifest(out, config, db, Path("logs"), workflow_dir, started)
    except Exception as e:  # noqa: BLE001 (a report, not a crash: see above)
        print(f"warning: {out} not written: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    print(f"run manifest: {out}", file=sys.stderr)
    return out
