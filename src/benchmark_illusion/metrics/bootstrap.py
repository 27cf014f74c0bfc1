"""The rates' percentile-bootstrap intervals as matrix products.

A SQL join of every item value with every replicate's draw count, summed per checkpoint x
benchmark x metric x replicate, gives the same intervals with work that grows as checkpoints x
items x metrics x replicates: billions of rows on the paper grid with every decode on every
item. Here, for one benchmark, the replicate sums of every checkpoint x metric are one
product of the (replicates x items) draw counts with the (items x columns) item values, and the
replicate denominators the same product with the 0/1 matrix of which items have a value. Pooled
rows (every benchmark of a model) add the benchmarks' sums before dividing.

The resamples are those of the bootstrap_weights view (workflow/sql/20_item_values.sql): each
benchmark's key comes from its bootstrap_benchmarks row, and `draws` is the view's
bootstrap_draw formula in numpy.
`create_rate_intervals` runs between the SQL files (aggregate.PYTHON_STEPS), after item_values
exists and before 25_rates.sql reads rate_intervals. docs/metrics.md defines the bootstrap.
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl


def row_quantiles(x: np.ndarray, probs: tuple[float, ...]) -> list[np.ndarray]:
    """Per row, the linearly interpolated quantiles of its finite values (DuckDB's
    quantile_cont); NaN for a row without any."""
    out = [np.full(x.shape[0], np.nan) for _ in probs]
    finite = np.isfinite(x)
    full = finite.all(axis=1)
    if full.any():  # the common case: numpy's partition-based quantile
        for o, v in zip(out, np.quantile(x[full], probs, axis=1), strict=True):
            o[full] = v
    rest = np.nonzero(~full)[0]
    if len(rest):
        s = np.sort(x[rest], axis=1)  # NaN sorts last
        n = finite[rest].sum(axis=1)
        rows = np.arange(len(rest))
        for o, q in zip(out, probs, strict=True):
            h = np.maximum(n - 1, 0) * q
            lo = np.floor(h).astype(np.int64)
            hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
            v = s[rows, lo] + (h - lo) * (s[rows, hi] - s[rows, lo])
            o[rest] = np.where(n > 0, v, np.nan)
    return out


def replicate_intervals(sums: np.ndarray, counts: np.ndarray, probs: tuple[float, float]):
    """Per column of (replicates x columns) sums and denominators: n_boot (replicates with a
    non-zero denominator) and the quantiles of sum / denominator over those replicates."""
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = np.where(counts > 0, sums / counts, np.nan)
    lo, hi = row_quantiles(reps.T, probs)
    return (counts > 0).sum(axis=0), lo, hi


_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def draws(key: int, n: int, replicates: int) -> np.ndarray:
    """(replicates x n) item indices: entry [b, j] is draw j of replicate b,
    splitmix64(key + (b * n + j + 1) * 0x9E3779B97F4A7C15) mod n. The same formula as the SQL
    macro bootstrap_draw (workflow/sql/20_item_values.sql), which defines the bootstrap_weights
    view; computed here because numpy draws the paper grid's 28 million in a fraction of a
    second. tests/metrics/test_bootstrap.py checks both against Python integers, draw by draw."""
    counter = np.arange(1, replicates * n + 1, dtype=np.uint64)
    z = np.uint64(key) + counter * np.uint64(_GOLDEN)  # uint64 arrays wrap mod 2^64
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    z ^= z >> np.uint64(31)
    return (z % np.uint64(n)).astype(np.int64).reshape(replicates, n)


def draw_counts(key: int, n: int, replicates: int) -> np.ndarray:
    """(replicates x n) how often replicate b drew item i (every row sums to n)."""
    flat = draws(key, n, replicates) + (np.arange(replicates, dtype=np.int64) * n)[:, None]
    return np.bincount(flat.ravel(), minlength=replicates * n).reshape(replicates, n)


def benchmark_counts(con: duckdb.DuckDBPyConnection, population: str, model: str) -> dict:
    """(dataset, lang) -> draw_counts of every benchmark of one population and model, with the
    keys and sizes of bootstrap_benchmarks."""
    return {
        (dataset, lang): draw_counts(int(key), int(n), int(reps))
        for dataset, lang, n, reps, key in con.execute(
            "SELECT dataset, lang, n, replicates, key FROM bootstrap_benchmarks "
            "WHERE population = ? AND model = ? ORDER BY dataset, lang",
            [population, model],
        ).fetchall()
    }


def create_rate_intervals(
    con: duckdb.DuckDBPyConnection,
    variables: dict,
    values: str = "item_values",
    into: str = "rate_intervals",
) -> None:
    """Create rate_intervals: one row per population x checkpoint x benchmark x metric of
    item_values, and pooled rows (dataset = lang = 'all'), with n_boot (replicates that drew an
    item of the metric's denominator), ci_low and ci_high (the (1 -/+ ci_level) / 2 quantiles
    of the replicate rates, linearly interpolated as DuckDB's quantile_cont). Reads item_values,
    bootstrap_units and bootstrap_benchmarks; variables: ci_level. `values` and `into` name
    another table or view of item_values' columns and the table to create from it."""
    level = float(variables["ci_level"])
    probs = ((1 - level) / 2, (1 + level) / 2)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _columns AS
           SELECT population, model, method, structure, sparsity, metric,
                  (row_number() OVER (PARTITION BY population, model
                                      ORDER BY method, structure, sparsity, metric) - 1)::INTEGER
                      AS col
           FROM (SELECT DISTINCT population, model, method, structure, sparsity, metric
                 FROM {values})"""
    )
    out: list[pl.DataFrame] = []

    def keep(cols, n_boot, lo, hi, **key):
        out.append(
            pl.DataFrame({"col": cols.astype(np.int32)}).with_columns(
                n_boot=pl.Series(n_boot, dtype=pl.Int64),
                ci_low=pl.Series(lo, dtype=pl.Float64),
                ci_high=pl.Series(hi, dtype=pl.Float64),
                **{k: pl.lit(v, dtype=pl.String) for k, v in key.items()},
            )
        )

    for population, model in con.execute(
        "SELECT DISTINCT population, model FROM _columns ORDER BY ALL"
    ).fetchall():
        n_cols = con.execute(
            "SELECT count(*) FROM _columns WHERE population = ? AND model = ?",
            [population, model],
        ).fetchone()[0]
        counts = benchmark_counts(con, population, model)
        frame = con.sql(
            f"""SELECT v.dataset, v.lang, u.idx::BIGINT AS idx, c.col, v.value
               FROM {values} v
               JOIN bootstrap_units u USING (population, model, dataset, lang, item_id)
               JOIN _columns c USING (population, model, method, structure, sparsity, metric)
               WHERE v.population = ? AND v.model = ?
               ORDER BY v.dataset, v.lang""",
            params=[population, model],
        ).pl()
        reps = next(iter(counts.values())).shape[0]
        pooled_s, pooled_n = np.zeros((reps, n_cols)), np.zeros((reps, n_cols))
        for (dataset, lang), part in frame.group_by(["dataset", "lang"], maintain_order=True):
            w = counts[(dataset, lang)].astype(np.float64)
            idx, col = part["idx"].to_numpy(), part["col"].to_numpy()
            vals = np.zeros((w.shape[1], n_cols))
            has = np.zeros((w.shape[1], n_cols))
            vals[idx, col] = part["value"].to_numpy()
            has[idx, col] = 1.0
            sums, dens = w @ vals, w @ has
            pooled_s += sums
            pooled_n += dens
            cols = np.unique(col)
            keep(
                cols,
                *replicate_intervals(sums[:, cols], dens[:, cols], probs),
                population=population,
                model=model,
                dataset=dataset,
                lang=lang,
            )
        cols = np.unique(frame["col"].to_numpy())
        keep(
            cols,
            *replicate_intervals(pooled_s[:, cols], pooled_n[:, cols], probs),
            population=population,
            model=model,
            dataset="all",
            lang="all",
        )
    schema = {
        "col": pl.Int32,
        "n_boot": pl.Int64,
        "ci_low": pl.Float64,
        "ci_high": pl.Float64,
        "population": pl.String,
        "model": pl.String,
        "dataset": pl.String,
        "lang": pl.String,
    }
    found = pl.concat(out, how="diagonal") if out else pl.DataFrame(schema=schema)
    con.register("_found", found)
    try:
        con.execute(
            f"""CREATE OR REPLACE TABLE {into} AS
               SELECT f.population, c.model, c.method, c.structure, c.sparsity, f.dataset, f.lang,
                      c.metric, f.n_boot, f.ci_low, f.ci_high
               FROM _found f JOIN _columns c USING (population, model, col)"""
        )
    finally:
        con.unregister("_found")
        con.execute("DROP TABLE IF EXISTS _columns")


def create_perturbation_intervals(con: duckdb.DuckDBPyConnection, variables: dict) -> None:
    """Create perturbation_intervals from perturbation_item_values (26_perturbation_items.sql):
    the intervals of every floor (size, damage, structure), on the same item resamples as every
    rate, of the per-item value averaged over a compressed checkpoint's twins of that kind
    (seeds). The floor rides in the metric's name through the bootstrap and is split off after."""
    con.execute(
        "CREATE OR REPLACE TEMP VIEW _floor_values AS SELECT * EXCLUDE (metric, floor), "
        "floor || '/' || metric AS metric FROM perturbation_item_values"
    )
    try:
        create_rate_intervals(con, variables, "_floor_values", "perturbation_intervals")
    finally:
        con.execute("DROP VIEW IF EXISTS _floor_values")
    con.execute(
        "CREATE OR REPLACE TABLE perturbation_intervals AS SELECT * EXCLUDE (metric), "
        "split_part(metric, '/', 1) AS floor, split_part(metric, '/', 2) AS metric "
        "FROM perturbation_intervals"
    )
