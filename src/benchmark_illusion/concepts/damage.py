"""The concept-damage tests: is a concept's drop more than its items' languages explain?

`damage_tests` (run by gaps.run_concept_sql before the report views) tests every concept's drop
against the null of no concept effect: seeded bootstrap intervals on the metric tables' item
resamples, a permutation test within languages, Benjamini-Hochberg q-values. It writes table
concept_damage_tests and adds its columns to concept_damage. Definitions: docs/concepts.md.
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl

from benchmark_illusion.concepts.gap_settings import GapSettings
from benchmark_illusion.metrics.bootstrap import draw_counts, row_quantiles

# the strict verdict's formats, then the sentence-tolerant verdict's (correct_sentence)
FORMATS = ("open", "candidates", "mc", "open_sentence", "candidates_sentence")


# --------------------------------------------------------------------------------------------
# Damage tests: is a concept's drop more than its items' languages explain?

TESTS_SCHEMA = {
    "model": pl.Utf8,
    "method": pl.Utf8,
    "structure": pl.Utf8,
    "sparsity": pl.Float64,
    "format": pl.Utf8,
    "dataset": pl.Utf8,
    "lang": pl.Utf8,
    "concept": pl.Int32,
    "support": pl.Int64,
    "n_benchmarks": pl.Int64,
    "drop": pl.Float64,
    "expected_drop": pl.Float64,
    "excess": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "excess_ci_low": pl.Float64,
    "excess_ci_high": pl.Float64,
    "n_boot": pl.Int64,
    "p_value": pl.Float64,
    "n_perm": pl.Int64,
    "supported": pl.Boolean,
    "q_value": pl.Float64,
}
# a permuted statistic counts as "at least the observed one" within this absolute tolerance (the
# same sums in another order differ in the last bits; drops are in [-1, 1])
_TIE_TOLERANCE = 1e-9
# values held at once per concept block (concepts x max(permutations, replicates)): ~32 MB of
# doubles
_BLOCK_VALUES = 4_000_000


def bh_qvalues(p) -> np.ndarray:
    """Benjamini-Hochberg q-values of one family of p-values: q_(i) = min over j >= i of
    m p_(j) / j (p sorted ascending, m = family size), capped at 1."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    q = np.empty(m)
    q[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    return q


def _permutation_ranks(
    con: duckdb.DuckDBPyConnection,
    model: str,
    dataset: str,
    lang: str,
    n: int,
    settings: GapSettings,
) -> np.ndarray:
    """(permutations x n): rank of each item (columns in item_id order) in permutation b.

    Permutation b orders a benchmark's items by
    md5('seed|permutation|model|dataset|lang|b|item_id'): fixed by the seed, not by DuckDB or
    numpy."""
    r = con.execute(
        f"""
        SELECT (row_number() OVER (
                    PARTITION BY p.b
                    ORDER BY md5(concat_ws('|', ?, 'permutation', u.model, u.dataset, u.lang, p.b,
                                           u.item_id)), u.item_id
                ) - 1)::INTEGER AS r
        FROM _damage_units u, range({int(settings.permutations)}) AS p(b)
        WHERE u.model = ? AND u.dataset = ? AND u.lang = ?
        ORDER BY p.b, u.idx""",
        [int(settings.seed), model, dataset, lang],
    ).fetchnumpy()["r"]
    return np.asarray(r, dtype=np.int64).reshape(int(settings.permutations), n)


def _benchmark_inputs(
    con,
    model: str,
    dataset: str,
    lang: str,
    n: int,
    concepts: np.ndarray,
    replicates: int,
    settings: GapSettings,
) -> dict:
    """The dense arrays of one benchmark: activations (concepts x items), bootstrap counts
    (replicates x items) and permutation ranks (permutations x items), items in item_id order."""
    a = con.execute(
        """SELECT u.idx, a.concept, a.activation::DOUBLE AS activation
                       FROM concept_activations a
                           JOIN _damage_units u USING (model, dataset, lang, item_id)
                       WHERE u.model = ? AND u.dataset = ? AND u.lang = ? AND a.activation > 0""",
        [model, dataset, lang],
    ).fetchnumpy()
    acts = np.zeros((len(concepts), n))
    acts[np.searchsorted(concepts, np.asarray(a["concept"])), np.asarray(a["idx"])] = np.asarray(
        a["activation"]
    )
    # the metric tables' resamples of this benchmark (bootstrap.draw_counts: the draws of the
    # bootstrap_weights view), its items mapped to this table's numbering
    n_all, key = con.execute(
        "SELECT n, key FROM bootstrap_benchmarks "
        "WHERE population = 'selected' AND model = ? AND dataset = ? AND lang = ?",
        [model, dataset, lang],
    ).fetchone()
    pairs = con.execute(
        """SELECT d.idx AS here, u.idx::BIGINT AS there FROM _damage_units d
           JOIN bootstrap_units u
             ON u.population = 'selected'
            AND (u.model, u.dataset, u.lang, u.item_id) = (d.model, d.dataset, d.lang, d.item_id)
           WHERE d.model = ? AND d.dataset = ? AND d.lang = ?""",
        [model, dataset, lang],
    ).fetchnumpy()
    counts = draw_counts(int(key), int(n_all), replicates)
    boot = np.zeros((replicates, n))
    boot[:, np.asarray(pairs["here"], dtype=np.int64)] = counts[
        :, np.asarray(pairs["there"], dtype=np.int64)
    ]
    return {
        "acts": acts,
        "boot": boot,
        "ranks": _permutation_ranks(con, model, dataset, lang, n, settings),
    }


def _test_group(bench: dict, drops: dict, n_concepts: int, settings: GapSettings) -> dict:
    """One pruned checkpoint x format: per benchmark and across, for every supported concept
    (support >= min_support there): its drop, the bootstrap intervals of the drop and of the
    excess, and the permutation p-value.

    bench: (dataset, lang) -> _benchmark_inputs; drops: (dataset, lang) -> item_drop per item (NaN:
    no pair). Returns (dataset, lang) -> dict of arrays (concept index first), 'all' included.
    A concept's drop in a benchmark is sum_x a_c(x) d(x) / sum_x a_c(x) = (a_c / |a_c|) . d, so
    each statistic is one matrix product over the items: concepts x items times items x
    (permutations or replicates).
    """
    lo_q, hi_q = (1 - settings.ci_level) / 2, (1 + settings.ci_level) / 2
    n_perm = int(settings.permutations)
    k = int(settings.min_support)
    prepared = {}
    for key, d in drops.items():
        m = np.isfinite(d)
        if not m.any():
            continue
        b = bench[key]
        dm = d[m]
        wm = b["boot"][:, m]
        n_drawn = wm.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            lang_boot = np.where(n_drawn > 0, (wm @ dm) / n_drawn, np.nan)
        acts = b["acts"][:, m]
        prepared[key] = {
            "acts": acts,
            "support": (acts > 0).sum(axis=1),
            "d": dm,
            "wm": wm,
            "wd": wm * dm,
            "perm_d": dm[np.argsort(b["ranks"][:, m], axis=1, kind="stable")],
            "lang": float(dm.mean()),
            "lang_boot": lang_boot,
        }
    if not prepared:
        return {}
    replicates = max(p["wm"].shape[0] for p in prepared.values())
    support_all = sum(p["support"] for p in prepared.values())
    tested = support_all >= k
    for p in prepared.values():
        tested |= p["support"] >= k
    tested = np.nonzero(tested)[0]
    out: dict = {key: [] for key in [*prepared, ("all", "all")]}
    block = max(1, _BLOCK_VALUES // max(n_perm, replicates, 1))

    def record(key, rows, support, n_bench, obs, expected, perm, boot, exc):
        ci_low, ci_high = row_quantiles(boot, (lo_q, hi_q))
        exc_low, exc_high = row_quantiles(exc, (lo_q, hi_q))
        out[key].append(
            {
                "concept": rows,
                "support": support,
                "n_benchmarks": n_bench,
                "drop": obs,
                "expected_drop": expected,
                "ci_low": ci_low,
                "ci_high": ci_high,
                "excess_ci_low": exc_low,
                "excess_ci_high": exc_high,
                "n_boot": np.isfinite(boot).sum(axis=1),
                "p_value": (1 + (perm >= obs[:, None] - _TIE_TOLERANCE).sum(axis=1)) / (1 + n_perm),
            }
        )

    for g0 in range(0, len(tested), block):
        rows = tested[g0 : g0 + block]
        size = len(rows)
        n_bench = np.zeros(size, dtype=np.int64)
        sum_obs = np.zeros(size)
        sum_lang = np.zeros(size)
        sum_perm = np.zeros((size, n_perm))
        sum_boot = np.zeros((size, replicates))
        sum_lang_boot = np.zeros((size, replicates))
        cnt_boot = np.zeros((size, replicates))
        for key, p in prepared.items():
            a = p["acts"][rows]
            weight = a.sum(axis=1)
            active = weight > 0
            if not active.any():
                continue
            share = a / np.where(active, weight, 1.0)[:, None]  # rows of inactive concepts stay 0
            obs = share @ p["d"]
            perm = share @ p["perm_d"].T
            den = a @ p["wm"].T
            drawn = den > 0
            with np.errstate(invalid="ignore", divide="ignore"):
                boot = np.where(drawn, (a @ p["wd"].T) / den, np.nan)
            lang_boot = np.where(drawn, p["lang_boot"][None, :], np.nan)
            here = np.nonzero(p["support"][rows] >= k)[0]
            if len(here):
                record(
                    key,
                    rows[here],
                    p["support"][rows][here],
                    np.ones(len(here), dtype=np.int64),
                    obs[here],
                    np.full(len(here), p["lang"]),
                    perm[here],
                    boot[here],
                    boot[here] - lang_boot[here],
                )
            n_bench += active
            sum_obs += obs
            sum_lang += np.where(active, p["lang"], 0.0)
            sum_perm += perm
            sum_boot += np.where(drawn, boot, 0.0)
            sum_lang_boot += np.where(drawn, lang_boot, 0.0)
            cnt_boot += drawn
        here = np.nonzero((support_all[rows] >= k) & (n_bench > 0))[0]
        if not len(here):
            continue
        nb = n_bench[here]
        cnt = cnt_boot[here]
        with np.errstate(invalid="ignore", divide="ignore"):
            boot = np.where(cnt > 0, sum_boot[here] / cnt, np.nan)
            lang_boot = np.where(cnt > 0, sum_lang_boot[here] / cnt, np.nan)
        record(
            ("all", "all"),
            rows[here],
            support_all[rows][here],
            nb,
            sum_obs[here] / nb,
            sum_lang[here] / nb,
            sum_perm[here] / nb[:, None],
            boot,
            boot - lang_boot,
        )
    return {
        key: {c: np.concatenate([part[c] for part in v]) for c in v[0]}
        for key, v in out.items()
        if v
    }


def damage_tests(con: duckdb.DuckDBPyConnection, settings: GapSettings) -> None:
    """Table concept_damage_tests, and its columns added to concept_damage.

    One row per pruned checkpoint x format x benchmark (and across) x supported concept (support
    >= min_support there: the tested ones), on the per-item drops of concept_item_drops
    (workflow/sql/concepts/30_damage.sql), each item weighted by a_c(x):
      drop, expected_drop, excess  the concept's drop, its benchmark's drop, their difference
                    (= concept_damage.drop_<f>, expected_drop_<f>, excess_<f>)
      ci_low/high   percentile interval of the drop over the metric tables' bootstrap resamples
                    of the items (bootstrap_weights, population 'selected'; level ci_level)
      excess_ci_*   the same for the excess (drop and language drop on the same resample)
      p_value       permutation test of "no concept effect": the item drops are permuted among
                    the items of each benchmark (one dataset in one language), which keeps every
                    language's drop; p = (1 + #{permuted drop >= drop}) / (1 + permutations)
      q_value       Benjamini-Hochberg over the family: the tested concepts of one checkpoint x
                    format x benchmark (or across)
    Across benchmarks each statistic is the mean over the benchmarks where the concept is active,
    as chi_model's 'all' rows. The permutations (seeded, _permutation_ranks) and the resamples are
    shared by all checkpoints and formats. concept_damage gains, per format f: drop_<f>_ci_low/high,
    excess_<f>_ci_low/high, p_<f>, q_<f> and significant_<f> (q_<f> < fdr_q and excess_<f> > 0).
    Table concept_damage_settings records the settings. Definitions: docs/concepts.md.
    """
    settings.check()
    con.execute("""CREATE OR REPLACE TEMP TABLE _damage_units AS
                   SELECT model, dataset, lang, item_id,
                          (row_number() OVER (PARTITION BY model, dataset, lang ORDER BY item_id)
                              - 1)::INTEGER AS idx
                   FROM (SELECT DISTINCT model, dataset, lang, item_id FROM concept_item_drops)""")
    try:
        frames = _damage_test_frames(con, settings)
    finally:
        con.execute("DROP TABLE IF EXISTS _damage_units")
    tests = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=TESTS_SCHEMA)
    con.register("damage_tests_frame", tests)
    con.execute(
        "CREATE OR REPLACE TABLE concept_damage_tests AS "
        "SELECT * FROM damage_tests_frame ORDER BY ALL"
    )
    con.unregister("damage_tests_frame")
    replicates = _bootstrap_replicates(con) or 0
    con.execute(f"""CREATE OR REPLACE TABLE concept_damage_settings AS
                    SELECT {int(settings.permutations)}::INTEGER AS permutations,
                           {int(replicates or 0)}::INTEGER AS bootstrap_replicates,
                           {float(settings.ci_level)!r}::DOUBLE AS ci_level,
                               {float(settings.fdr_q)!r}::DOUBLE AS fdr_q,
                           {int(settings.min_support)}::INTEGER AS min_support,
                               {int(settings.seed)}::BIGINT AS seed""")
    keys = "model, method, structure, sparsity, dataset, lang, concept"
    wide = ",\n".join(
        f"""max(ci_low) FILTER (WHERE format = '{f}') AS drop_{f}_ci_low,
           max(ci_high) FILTER (WHERE format = '{f}') AS drop_{f}_ci_high,
           max(excess_ci_low) FILTER (WHERE format = '{f}') AS excess_{f}_ci_low,
           max(excess_ci_high) FILTER (WHERE format = '{f}') AS excess_{f}_ci_high,
           max(p_value) FILTER (WHERE format = '{f}') AS p_{f},
           max(q_value) FILTER (WHERE format = '{f}') AS q_{f}"""
        for f in FORMATS
    )
    flags = ",\n".join(
        f"coalesce(t.q_{f} < {float(settings.fdr_q)!r} AND d.excess_{f} > 0, false) "
        f"AS significant_{f}"
        for f in FORMATS
    )
    con.execute(f"""
        CREATE OR REPLACE TABLE concept_damage AS
        WITH t AS (SELECT {keys}, {wide} FROM concept_damage_tests GROUP BY ALL)
        SELECT d.*, t.* EXCLUDE ({keys}), {flags}
        FROM concept_damage d LEFT JOIN t USING ({keys})
        ORDER BY {keys}""")


def _bootstrap_replicates(con: duckdb.DuckDBPyConnection) -> int | None:
    """Replicates of the metric tables' item resamples (population 'selected'); None without
    them."""
    has = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'bootstrap_benchmarks'"
    ).fetchall()[0][0]
    if not has:
        return None
    return int(
        con.execute(
            "SELECT coalesce(max(replicates), 0) FROM bootstrap_benchmarks "
            "WHERE population = 'selected'"
        ).fetchall()[0][0]
    )


def _damage_test_frames(
    con: duckdb.DuckDBPyConnection, settings: GapSettings
) -> list[pl.DataFrame]:
    units = con.sql(
        "SELECT model, dataset, lang, count(*) AS n FROM _damage_units GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    if not units:
        return []
    replicates = _bootstrap_replicates(con)
    if replicates is None:
        raise RuntimeError(
            "the damage tests resample the metric tables' items (bootstrap_benchmarks, "
            "workflow/sql/20_item_values.sql), which this database lacks"
        )
    frames = []
    for model in sorted({u[0] for u in units}):
        concepts = np.sort(
            np.asarray(
                con.execute(
                    """SELECT DISTINCT a.concept FROM concept_activations a JOIN _damage_units u
               USING (model, dataset, lang, item_id) WHERE u.model = ? AND a.activation > 0""",
                    [model],
                ).fetchnumpy()["concept"]
            )
        )
        if not len(concepts):
            continue
        bench = {
            (d, lang): _benchmark_inputs(
                con, model, d, lang, n, concepts, int(replicates), settings
            )
            for m, d, lang, n in units
            if m == model
        }
        drops = con.sql(
            """
            SELECT c.method, c.structure, c.sparsity, c.format, c.dataset, c.lang, u.idx,
                c.item_drop
            FROM concept_item_drops c JOIN _damage_units u USING (model, dataset, lang, item_id)
            WHERE c.model = ? ORDER BY ALL""",
            params=[model],
        ).pl()
        for (method, structure, sparsity, fmt), g in drops.group_by(
            ["method", "structure", "sparsity", "format"], maintain_order=True
        ):
            vectors = {}
            for (dataset, lang), gb in g.group_by(["dataset", "lang"], maintain_order=True):
                v = np.full(bench[(dataset, lang)]["acts"].shape[1], np.nan)
                v[gb["idx"].to_numpy()] = gb["item_drop"].to_numpy()
                vectors[(dataset, lang)] = v
            for (dataset, lang), r in _test_group(bench, vectors, len(concepts), settings).items():
                supported = r["support"] >= settings.min_support
                q = np.full(len(supported), np.nan)
                q[supported] = bh_qvalues(r["p_value"][supported])
                frames.append(
                    pl.DataFrame(
                        {
                            "model": model,
                            "method": method,
                            "structure": structure,
                            "sparsity": sparsity,
                            "format": fmt,
                            "dataset": dataset,
                            "lang": lang,
                            "concept": concepts[r["concept"]],
                            **{
                                k: r[k]
                                for k in ("support", "n_benchmarks", "drop", "expected_drop")
                            },
                            "excess": r["drop"] - r["expected_drop"],
                            **{
                                k: r[k]
                                for k in (
                                    "ci_low",
                                    "ci_high",
                                    "excess_ci_low",
                                    "excess_ci_high",
                                    "n_boot",
                                    "p_value",
                                )
                            },
                            "n_perm": int(settings.permutations),
                            "supported": supported,
                            "q_value": q,
                        },
                        schema=TESTS_SCHEMA,
                        nan_to_null=True,
                    )
                )
    return frames
