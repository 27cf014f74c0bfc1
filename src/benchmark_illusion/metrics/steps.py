"""The metrics stage's file steps: the results database from the logs and reports
(`build_database`, which runs workflow/sql/*.sql over the views of aggregate.py) and the
figures drawn from it (`make_figures`). The other stages' steps are in their own `steps.py`
(docs/design.md lists where each lives).
"""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb

from benchmark_illusion.metrics import dbfile
from benchmark_illusion.metrics.aggregate import (
    MetricSettings,
    connect,
    create_views,
    run_metric_sql,
)
from benchmark_illusion.metrics.figures.accuracy import (
    accuracy_vs_size,
    accuracy_vs_sparsity,
    mc_only_by_language,
    mc_only_split,
)
from benchmark_illusion.metrics.figures.concepts import (
    concept_coverage,
    concept_damage,
    concept_extremes,
)
from benchmark_illusion.metrics.figures.diagnostics import (
    gold_rank_cdf,
    oracle_vs_sparsity,
    position_bias,
    recovery_by_decode,
)
from benchmark_illusion.metrics.figures.names import METRIC_FIGURES

log = logging.getLogger("benchmark_illusion")

# every figure by its name (figures/names.py lists them)
DRAW = {
    f.__name__: f
    for f in (
        accuracy_vs_sparsity,
        mc_only_by_language,
        mc_only_split,
        accuracy_vs_size,
        gold_rank_cdf,
        recovery_by_decode,
        position_bias,
        oracle_vs_sparsity,
        concept_coverage,
        concept_extremes,
        concept_damage,
    )
}


def make_figures(
    db_path: str | Path, out_dir: str | Path, names: tuple[str, ...] = METRIC_FIGURES
) -> list[Path]:
    """Write the named figures (default: the metric figures; CONCEPT_FIGURES for the concept ones)
    into out_dir as {name}.png; return their paths."""
    con = connect(db_path)
    out = []
    try:
        for name in names:
            path = Path(out_dir) / f"{name}.png"
            DRAW[name](con, path)
            out.append(path)
    finally:
        con.close()
    return out


def build_database(
    db_path: str | Path,
    *,
    generations: list[str],
    selected: list[str],
    pool: list[str],
    sql_files: list[str],
    settings: MetricSettings | None = None,
    item_reports: list[str] | None = None,
    perturbation_reports: list[str] | None = None,
    model_sources: dict | None = None,
    variant_reports: list[str] | None = None,
    log_path: str = "logs/aggregate.log",
) -> None:
    """Write the database atomically: an interrupted run leaves the previous file intact.

    Before any work: no other process may hold the database read-write, and every Parquet log
    must be readable (dbfile.check_free, dbfile.check_parquet: one-line errors naming the
    holder or the file). The new file replaces the old by one rename, without a stale write-ahead
    log beside it, and then its stamp is written, the rule's declared output
    (dbfile.replace_database): the old file stays in place until then."""
    logs = [*generations, *selected, *pool]
    with dbfile.replace_database(db_path, log_path, lambda: dbfile.check_parquet(logs)) as tmp:
        con = duckdb.connect(str(tmp))
        try:
            create_views(
                con,
                generations,
                selected,
                pool,
                item_reports,
                perturbation_reports,
                model_sources,
                variant_reports,
            )
            run_metric_sql(con, sql_files, settings)
            for (name,) in con.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_type = 'BASE TABLE' ORDER BY 1"
            ).fetchall():
                n = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
                log.info("%s: %d rows", name, n)
        finally:
            con.close()
