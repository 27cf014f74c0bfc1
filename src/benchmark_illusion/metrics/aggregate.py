"""Build results/illusion.duckdb: views over the Parquet logs, metric tables from workflow/sql/.

The views name their Parquet files by paths relative to the project root (where Snakemake
runs), so the database stays valid when the whole project folder moves; open it from the
project root, or use `python -m benchmark_illusion sql`, which does so for you. Metric
tables are materialised and need no Parquet file at query time.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from benchmark_illusion.compression.perturbation import REPORT as PERTURBATION_REPORT
from benchmark_illusion.io import parquet_list
from benchmark_illusion.metrics import bootstrap, exact, illusion
from benchmark_illusion.models import variants

log = logging.getLogger("benchmark_illusion")


def create_views(
    con: duckdb.DuckDBPyConnection,
    generations: list[str],
    selected: list[str],
    pool: list[str],
    item_reports: list[str] | None = None,
    perturbation_reports: list[str] | None = None,
    model_sources: dict | None = None,
    variant_reports: list[str] | None = None,
) -> None:
    """Views over exactly the given files (never a glob: stale files of an old config stay out).

    generations     evaluation logs on the selected items (every checkpoint)
    pool            the dense model's evaluation of the selection pool
    selected_items  the selected items, with the model they were selected for (item files
                    written before distractors_in_passage existed get it as NULL)
    item_drops      (a table) rows dropped before any model saw them, from the build_items
                    reports: dataset, lang, reason, n (see `item_drop_rows`)
    option_quality  (a table) the options of every built item by source ('gold', 'answer',
                    'span', 'other_passage') and kind ('number', 'name', 'other'): n_options and
                    n_function_edge, how many start or end with a function word of the language
                    (`items.option_quality_rows`, `option_quality_rows`)
    perturbations   (a table) one row per twin or placebo, from its perturbation.json (a file or
                    the checkpoint folder): model, method, structure, sparsity, seed,
                    source_method, relative_change (measured), source_relative_change (the
                    compressed checkpoint's), n_perturbed (Linears), kind (size, damage,
                    structure), control ('placebo' or NULL), scale, damage_kl, damage_nll (its
                    damage on the held-out windows), source_damage_kl, source_damage_nll (the
                    source's), dense_nll, matched (the damage search met its tolerance)
    model_sources   (a table) one row per model of `model_sources` (model -> its config's
                    source keys): model, source, weight_type and bits_per_weight of the
                    decoder's weight matrices as the source stores them (read from a GGUF
                    file's tensor table; NULL for safetensors sources, stored as their dtype)
    variants        (a table) one row per compressed variant made elsewhere, from its variant.json
                    (benchmark_illusion.models.variants): its checkpoint key (method = its name,
                    structure 'variant'), variant_method (the config's free text), source, what was
                    measured on its weights (measured_sparsity, nm, bits, group_size,
                    max_distinct_per_32; gguf_weight_type, gguf_bits_per_weight of a GGUF file),
                    weight_bits, and the config's claims (claimed_sparsity, claimed_bits,
                    claimed_bits_per_weight)
    """
    if not generations:
        raise ValueError("no evaluation logs to aggregate")
    con.execute(
        "CREATE OR REPLACE VIEW generations AS SELECT * "
        f"FROM read_parquet({parquet_list(generations)}, union_by_name = true)"
    )
    con.execute(
        "CREATE OR REPLACE VIEW pool AS SELECT * "
        f"FROM read_parquet({parquet_list(pool)}, union_by_name = true)"
    )
    # results/selected/{model}/{dataset}/{lang}.parquet: the model is the third path part.
    files = f"read_parquet({parquet_list(selected)}, union_by_name = true, filename = true)"
    columns = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {files}").fetchall()}
    missing = (
        "" if "distractors_in_passage" in columns else ", NULL::BOOLEAN AS distractors_in_passage"
    )
    con.execute(
        "CREATE OR REPLACE VIEW selected_items AS SELECT split_part(filename, '/', -3) AS model, "
        f"* EXCLUDE (filename){missing} FROM {files}"
    )
    reports = item_reports or []
    _table(
        con,
        "item_drops",
        "dataset VARCHAR, lang VARCHAR, reason VARCHAR, n BIGINT",
        [r for path in reports for r in item_drop_rows(path)],
    )
    _table(
        con,
        "option_quality",
        "dataset VARCHAR, lang VARCHAR, source VARCHAR, kind VARCHAR, n_options BIGINT, "
        "n_function_edge BIGINT",
        [r for path in reports for r in option_quality_rows(path)],
    )
    _table(
        con,
        "perturbations",
        PERTURBATIONS_TABLE,
        perturbation_rows(perturbation_reports or []),
    )
    _table(
        con,
        "model_sources",
        "model VARCHAR, source VARCHAR, weight_type VARCHAR, bits_per_weight DOUBLE",
        [model_source_row(m, cfg) for m, cfg in sorted((model_sources or {}).items())],
    )
    _table(con, "variants", variants.VARIANTS_TABLE, variants.report_rows(variant_reports or []))


def _table(con, name: str, columns: str, rows: list[tuple]) -> None:
    """Create (or replace) table `name` with `columns` (DDL) and insert `rows`."""
    con.execute(f"CREATE OR REPLACE TABLE {name} ({columns})")
    if rows:
        marks = ", ".join("?" * len(rows[0]))
        con.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)


PERTURBATIONS_TABLE = (
    "model VARCHAR, method VARCHAR, structure VARCHAR, sparsity DOUBLE, seed BIGINT, "
    "source_method VARCHAR, relative_change DOUBLE, source_relative_change DOUBLE, "
    "n_perturbed BIGINT, kind VARCHAR, control VARCHAR, scale DOUBLE, damage_kl DOUBLE, "
    "damage_nll DOUBLE, source_damage_kl DOUBLE, source_damage_nll DOUBLE, dense_nll DOUBLE, "
    "matched BOOLEAN"
)


def perturbation_rows(paths) -> list[tuple]:
    """The `perturbations` table's rows (PERTURBATIONS_TABLE) of each twin's or placebo's
    perturbation.json (a file, or the checkpoint folder holding it): its key, seed, source,
    relative changes, Linears perturbed, kind, control ('placebo' or NULL), scale, damage (KL,
    NLL) and its source's, the dense model's NLL on the same text, and whether the damage
    matched (NULL for size twins, which match the size). Reports written before the damage
    measure get NULL damage and kind 'size'."""
    rows = []
    for p in paths:
        p = Path(p)
        r = json.loads((p / PERTURBATION_REPORT if p.is_dir() else p).read_text())
        rows.append(
            (
                r["model"],
                r["method"],
                r["structure"],
                float(r["sparsity"]),
                int(r["seed"]),
                r["source_method"],
                float(r["relative_change"]),
                float(r["source_relative_change"]),
                int(r["n_perturbed"]),
                r.get("kind", "size"),
                r.get("control"),
                float(r.get("scale", 1.0)),
                r.get("damage_kl"),
                r.get("damage_nll"),
                r.get("source_damage_kl"),
                r.get("source_damage_nll"),
                r.get("dense_nll"),
                r.get("matched"),
            )
        )
    return rows


def model_source_row(model: str, cfg: dict) -> tuple:
    """(model, source, weight_type, bits_per_weight) of one model config (`model_sources`)."""
    from benchmark_illusion.models.sources import gguf_precision, resolve_gguf

    if cfg["source"] in ("gguf_package", "gguf_file"):
        p = gguf_precision(resolve_gguf(cfg))
        return (model, cfg["source"], p["weight_type"], p["bits_per_weight"])
    return (model, cfg["source"], None, None)


def option_quality_rows(report_path: str | Path) -> list[tuple[str, str, str, str, int, int]]:
    """(dataset, lang, source, kind, n_options, n_function_edge) rows of one build_items report
    (items.option_quality_rows); none for a report written before the rows existed."""
    path = Path(report_path)
    report = json.loads(path.read_text())
    dataset = report.get("dataset") or path.parent.name
    return [
        (dataset, r["lang"], r["source"], r["kind"], int(r["n_options"]), int(r["n_function_edge"]))
        for r in report.get("items", {}).get("option_quality", [])
    ]


def item_drop_rows(report_path: str | Path) -> list[tuple[str, str, str, int]]:
    """(dataset, lang, reason, n) rows of one results/items/{dataset}/{lang}.report.json.

    One row per validation reason (items.REASONS: bad rows) and 'too_few_distractors'
    (valid rows that got fewer than 3 distractors), zeros included: every row of the raw
    file is either an item or counted under exactly one reason.
    """
    path = Path(report_path)
    report = json.loads(path.read_text())
    dataset = report.get("dataset") or path.parent.name
    lang = path.name.removesuffix(".report.json")
    skip = {"n_input", "n_valid", "examples"}
    rows = [
        (dataset, lang, reason, int(n))
        for reason, n in report.get("validation", {}).items()
        if reason not in skip
    ]
    rows.append(
        (
            dataset,
            lang,
            "too_few_distractors",
            int(report.get("items", {}).get("too_few_distractors", 0)),
        )
    )
    return rows


@dataclass(frozen=True)
class MetricSettings:
    """Bootstrap settings of the metric tables (config `metrics`, seeded by the config seed)."""

    seed: int = 1234
    bootstrap_replicates: int = 1000
    ci_level: float = 0.95


# Steps in Python between the SQL files: each runs just before the file it is named after, with
# the files' variables, and makes tables that file reads. The rates' bootstrap intervals are
# matrix products there; as a SQL join they grew as checkpoints x items x metrics x replicates.
PYTHON_STEPS = {
    "25_rates.sql": bootstrap.create_rate_intervals,
    # the perturbation floor's intervals, over the twins' seed-averaged item values
    "27_perturbation.sql": bootstrap.create_perturbation_intervals,
    # the paired test of every checkpoint against its floors (illusion_test)
    "55_illusion.sql": illusion.create_illusion_test,
}


def run_sql(
    con: duckdb.DuckDBPyConnection, sql_files: list[str], variables: dict[str, int | float]
) -> None:
    """Set the DuckDB variables the files read with getvariable(), then run each file in name
    order (each defines its tables with CREATE OR REPLACE), with the PYTHON_STEPS among them."""
    for name, value in variables.items():
        con.execute(f"SET VARIABLE {name} = {value!r}")
    for f in sorted(sql_files, key=lambda p: Path(p).name):
        step = PYTHON_STEPS.get(Path(f).name)
        if step is not None:
            t0 = time.perf_counter()
            step(con, variables)
            name = f"{step.__module__}.{step.__name__}"
            log.info("ran %s in %.1f s", name, time.perf_counter() - t0)
        t0 = time.perf_counter()
        con.execute(Path(f).read_text())
        log.info("ran %s in %.1f s", f, time.perf_counter() - t0)


def run_sql_files(
    con: duckdb.DuckDBPyConnection, sql_files: list[str], settings: MetricSettings | None = None
) -> None:
    """Run the metric files with their parameters: bootstrap_seed, bootstrap_replicates,
    ci_level, and ci_z (the two-sided normal quantile of ci_level, for the closed-form
    intervals of 25_rates.sql: exact.z_of)."""

    s = settings or MetricSettings()
    if s.bootstrap_replicates < 1 or not 0 < s.ci_level < 1:
        raise ValueError(
            f"metrics: bootstrap_replicates must be >= 1 and ci_level in (0, 1), got {s}"
        )
    run_sql(
        con,
        sql_files,
        {
            "bootstrap_seed": int(s.seed),
            "bootstrap_replicates": int(s.bootstrap_replicates),
            "ci_level": float(s.ci_level),
            "ci_z": exact.z_of(float(s.ci_level)),
        },
    )


CHECKPOINT_KEY = ("model", "method", "structure", "sparsity")
# SQL files named from this on (90_report.sql) define report views over the finished tables, so
# they run after add_bits_columns and can show `bits`.
REPORT_FILES_FROM = "90"


def split_report_files(sql_files: list[str]) -> tuple[list[str], list[str]]:
    """(table files, report files) of a list of SQL files, by REPORT_FILES_FROM."""
    tables = [f for f in sql_files if Path(f).name < REPORT_FILES_FROM]
    return tables, [f for f in sql_files if Path(f).name >= REPORT_FILES_FROM]


def add_bits_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Give every table keyed by checkpoint (model, method, structure, sparsity) the checkpoint's
    `bits` (from the `checkpoints` table; NULL when not quantized) right after `sparsity`, rows
    in the same order; return the tables changed. Tables that have `bits` already are skipped,
    so running it again (the concept stage, on a copy of the metric database) changes nothing;
    without a `checkpoints` table (05_checkpoints.sql not run) nothing changes either.
    """
    changed = []
    if not con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'checkpoints'"
    ).fetchone()[0]:
        return changed
    tables = con.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_type = 'BASE TABLE' AND table_name <> 'checkpoints' "
        "ORDER BY 1"
    ).fetchall()
    for (name,) in tables:
        cols = [r[0] for r in con.execute(f'DESCRIBE "{name}"').fetchall()]
        if "bits" in cols or not set(CHECKPOINT_KEY) <= set(cols):
            continue
        at = cols.index("sparsity") + 1
        select = ", ".join(
            [f't."{c}"' for c in cols[:at]] + ["c.bits"] + [f't."{c}"' for c in cols[at:]]
        )
        on = " AND ".join(f't."{k}" IS NOT DISTINCT FROM c."{k}"' for k in CHECKPOINT_KEY)
        con.execute(
            f'CREATE OR REPLACE TABLE "{name}" AS SELECT {select} FROM "{name}" t '
            f"LEFT JOIN (SELECT DISTINCT {', '.join(CHECKPOINT_KEY)}, bits FROM checkpoints) c "
            f"ON {on} ORDER BY t.rowid"
        )
        changed.append(name)
    return changed


def run_metric_sql(
    con: duckdb.DuckDBPyConnection, sql_files: list[str], settings: MetricSettings | None = None
) -> None:
    """The metric tables (files before REPORT_FILES_FROM), their `bits` column
    (add_bits_columns), then the report views."""
    tables, reports = split_report_files(sql_files)
    run_sql_files(con, tables, settings)
    add_bits_columns(con)
    run_sql_files(con, reports, settings)


def connect(db_path: str | Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the results database (read-only by default)."""
    if not Path(db_path).is_file():
        raise FileNotFoundError(
            f"no results database at {db_path}; run `make run` (or snakemake) first"
        )
    return duckdb.connect(str(db_path), read_only=read_only)
