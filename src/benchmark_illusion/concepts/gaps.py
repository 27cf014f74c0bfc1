"""Competency gaps in results/illusion.duckdb: the concept tables next to the metric tables.

The `aggregate` rule writes results/metrics.duckdb (the metric tables); `competency_gaps` copies
it, loads the concept activations and labels as tables, runs workflow/sql/concepts/*.sql in name
order, tests every concept's drop against the null of no concept effect (seeded bootstrap
intervals, a permutation test within languages, Benjamini-Hochberg q-values; `damage_tests`,
damage.py) before the report views (90_report.sql) that read the tests' columns, measures the
stability of chi_bench and chi_model on seeded item subsamples, and writes
results/illusion.duckdb atomically. Definitions: docs/concepts.md.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import duckdb
import polars as pl

from benchmark_illusion.concepts.damage import damage_tests
from benchmark_illusion.concepts.gap_settings import GapSettings
from benchmark_illusion.io import parquet_list
from benchmark_illusion.metrics.aggregate import add_bits_columns, run_sql, split_report_files

log = logging.getLogger("benchmark_illusion")

# Tables the concept SQL reads besides its own: the subsample views shadow these.
ITEM_TABLES = ("concept_tokens", "concept_activations", "item_outcomes", "pool")


def load_concept_tables(
    con: duckdb.DuckDBPyConnection, activations: list[str], tokens: list[str], labels: list[str]
) -> None:
    """Materialise the concept inputs as tables (queries need no Parquet file afterwards)."""
    for table, paths in (
        ("concept_activations", activations),
        ("concept_tokens", tokens),
        ("concept_labels", labels),
    ):
        con.execute(
            f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM read_parquet({parquet_list(paths)})"
        )


def load_sae_fits(con: duckdb.DuckDBPyConnection, fits: dict[str, str]) -> None:
    """Table concept_sae: one row per model with its SAE's fit statistics (fit.json)."""
    rows = []
    for model, path in sorted(fits.items()):
        f = json.loads(Path(path).read_text())
        rows.append(
            {
                "model": model,
                "source": f["source"],
                "hook_name": f["hook_name"],
                "d_sae": f["d_sae"],
                "k": f.get("k"),
                "fve": f["fve"],
                "l0": f["l0"],
                "dead_fraction": f["dead_fraction"],
                "pca_fve_same_k": f.get("pca_fve_same_k"),
                "heldout_positions": f["heldout_positions"],
                "norm_threshold": f["norm_threshold"],
                "corpus_tokens": f["corpus_tokens"],
                "seconds": f["seconds"],
            }
        )
    df = pl.DataFrame(rows, schema_overrides={"k": pl.Int64, "pca_fve_same_k": pl.Float64})
    con.register("fits", df)
    con.execute("CREATE OR REPLACE TABLE concept_sae AS SELECT * FROM fits")
    con.unregister("fits")


def run_concept_sql(
    con: duckdb.DuckDBPyConnection, sql_files: list[str], settings: GapSettings, tests: bool = True
) -> None:
    """Run the concept files with their parameters (under_quantile, over_quantile, min_support)
    in name order; with `tests`, the damage tests (`damage_tests`, which add their columns to
    concept_damage) run before the report files (named from REPORT_FILES_FROM on). Without
    `tests` (the stability subsamples) neither the damage tests nor the report files run."""
    settings.check()
    tables, reports = split_report_files(sql_files)
    run_sql(
        con,
        tables,
        {
            "under_quantile": float(settings.under_quantile),
            "over_quantile": float(settings.over_quantile),
            "min_support": int(settings.min_support),
        },
    )
    if tests:
        damage_tests(con, settings)
        add_bits_columns(con)  # the concept tables keyed by checkpoint, before their views
        run_sql(con, reports, {})


def _subsample_views(
    con: duckdb.DuckDBPyConnection, schema: str, repeat: int, settings: GapSettings
) -> None:
    """Views in `schema` that keep a seeded `stability_fraction` of every benchmark's items."""
    con.execute(f"CREATE SCHEMA {schema}")
    con.execute(f"""
        CREATE VIEW {schema}.kept_items AS
        SELECT model, dataset, lang, item_id FROM (
            SELECT model, dataset, lang, item_id,
                   row_number() OVER (PARTITION BY model, dataset, lang
                                      ORDER BY md5(concat_ws('|', {int(settings.seed)}, {repeat},
                                          model, dataset, lang, item_id))) AS r,
                   count(*) OVER (PARTITION BY model, dataset, lang) AS n
            FROM main.concept_tokens)
        WHERE r <= greatest(1, round({float(settings.stability_fraction)!r} * n))""")
    for t in ITEM_TABLES:
        con.execute(
            f"CREATE VIEW {schema}.{t} AS SELECT * FROM main.{t} "
            f"SEMI JOIN {schema}.kept_items USING (model, dataset, lang, item_id)"
        )


def stability(
    con: duckdb.DuckDBPyConnection, sql_files: list[str], settings: GapSettings
) -> pl.DataFrame:
    """Change of chi_bench and chi_model when each benchmark keeps a random share of its items.

    For each of `stability_repeats` seeded subsamples the concept SQL runs again on the kept
    items (the same definitions); values are compared with the full-data ones: chi_bench where
    the concept is active in the full data, chi_model where it is supported in the full data and
    the subsample. One row per model x metric x scope ('benchmark' rows or 'all' across them).
    """
    parts = []
    for r in range(settings.stability_repeats):
        schema = f"stability_{r}"
        _subsample_views(con, schema, r, settings)
        con.execute(f"SET schema = '{schema}'")
        con.execute(f"SET search_path = '{schema},main'")
        try:
            run_concept_sql(con, sql_files, settings, tests=False)
        finally:
            con.execute("SET schema = 'main'")
            con.execute("SET search_path = 'main'")
        parts.append(
            con.sql(f"""
            SELECT f.model, 'chi_bench' AS metric,
                CASE WHEN f.dataset = 'all' THEN 'all' ELSE 'benchmark' END AS scope,
                   {r} AS repeat, f.model || f.dataset || f.lang AS grp,
                       f.chi_bench AS full_value, s.chi_bench AS sub_value
            FROM main.chi_bench f JOIN {schema}.chi_bench s USING (model, dataset, lang, concept)
            WHERE f.n_active > 0 AND s.chi_bench IS NOT NULL
            UNION ALL
            SELECT f.model, 'chi_model',
                CASE WHEN f.dataset = 'all' THEN 'all' ELSE 'benchmark' END, {r},
                   concat_ws('|', f.population, f.model, f.method, f.structure, f.sparsity,
                       f.format, f.dataset, f.lang),
                   f.chi_model, s.chi_model
            FROM main.chi_model f
            JOIN {schema}.chi_model s
                USING (population, model, method, structure, sparsity, format, dataset, lang,
                       concept)
            WHERE f.supported AND s.supported
        """).pl()
        )
        con.execute(f"DROP SCHEMA {schema} CASCADE")
    if not parts:
        return pl.DataFrame()
    d = pl.concat(parts)
    con.register("stability_values", d)
    out = con.sql(f"""
        WITH ranked AS (
            SELECT *, abs(sub_value - full_value) AS change,
                   abs(sub_value - full_value) / nullif(abs(full_value), 0) AS rel_change,
                   rank() OVER (PARTITION BY model, metric, scope, repeat, grp
                       ORDER BY full_value) AS rf,
                   rank() OVER (PARTITION BY model, metric, scope, repeat, grp ORDER BY sub_value)
                       AS rs
            FROM stability_values
        ),
        corr AS (
            SELECT model, metric, scope, repeat, grp, corr(rf, rs) AS spearman
            FROM ranked GROUP BY ALL HAVING count(*) >= 3
        )
        SELECT r.model, r.metric, r.scope, {settings.stability_repeats} AS repeats,
               {float(settings.stability_fraction)!r} AS fraction, count(*) AS n_values,
               median(change) AS median_abs_change, quantile_cont(change, 0.9) AS p90_abs_change,
               max(change) AS max_abs_change, median(rel_change) AS median_rel_change,
               quantile_cont(rel_change, 0.9) AS p90_rel_change,
               (SELECT median(spearman) FROM corr c WHERE c.model = r.model AND c.metric = r.metric
                                                    AND c.scope = r.scope) AS median_spearman
        FROM ranked r
        GROUP BY r.model, r.metric, r.scope
        ORDER BY ALL""").pl()
    con.unregister("stability_values")
    return out
