"""Reading a Snakemake dry run's output in tests."""

from __future__ import annotations


def planned_jobs(out: str) -> dict[str, int]:
    """The dry run's job table: rule -> job count (the 'job  count' lines after 'Job stats:')."""
    lines = out.split("Job stats:", 1)[1].splitlines()
    jobs = {}
    for line in lines[3:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        jobs[parts[0]] = int(parts[1])
    return jobs
