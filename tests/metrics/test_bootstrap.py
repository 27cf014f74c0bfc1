"""The resamples (splitmix64 draws under an md5 key) and the rates' intervals as matrix
products, against a pure-Python reference and against the SQL join they replaced."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from benchmark_illusion.metrics.aggregate import MetricSettings
from benchmark_illusion.metrics.bootstrap import benchmark_counts, row_quantiles
from metrics.test_sql import build, row

MASK = 2**64 - 1


def reference_draw(seed, population, model, dataset, lang, b, j, n):
    """Draw j of replicate b, from the definition in docs/metrics.md, with Python integers."""
    key = int.from_bytes(
        hashlib.md5(f"{seed}|{population}|{model}|{dataset}|{lang}".encode()).digest()[:8], "big"
    )
    z = (key + (b * n + j + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) % n


def _units_db(tmp_path, sizes: dict, replicates: int, seed: int = 1234):
    """A database with one benchmark per language of the given sizes (every item right)."""
    rows, selected = [], {}
    for lang, n in sizes.items():
        ids = [f"{lang}{i:04d}" for i in range(n)]
        selected[lang] = ids
        for i in ids:
            rows += [
                row("dense", i, "open", True, lang=lang),
                row("dense", i, "mc", True, lang=lang),
            ]
    return build(tmp_path, rows, selected, seed=seed, bootstrap_replicates=replicates)


def test_draws_follow_the_documented_definition(tmp_path):
    """The view bootstrap_weights (SQL) and the numpy draws of the intervals against Python
    integers, draw by draw."""
    n, reps = 37, 5
    con = _units_db(tmp_path, {"th": n}, reps)
    want = np.zeros((reps, n), dtype=np.int64)
    for b in range(reps):
        for j in range(n):
            want[b, reference_draw(1234, "selected", "m", "d", "th", b, j, n)] += 1
    assert np.array_equal(benchmark_counts(con, "selected", "m")[("d", "th")], want)
    view = np.zeros((reps, n), dtype=np.int64)
    for item, b, w in con.execute(
        "SELECT item_id, b, w FROM bootstrap_weights WHERE population = 'selected'"
    ).fetchall():
        view[b, int(item[2:])] = w
    assert np.array_equal(view, want)


def test_draw_counts_are_uniform_and_keyed(tmp_path):
    n, reps = 10, 20000
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    con = _units_db(tmp_path / "a", {"en": n, "de": n}, reps)
    counts = benchmark_counts(con, "selected", "m")
    w = counts[("d", "en")]
    assert (w.sum(axis=1) == n).all()
    freq = w.sum(axis=0)
    chi2 = ((freq - reps) ** 2 / reps).sum()
    assert chi2 < 27.9  # 9 degrees of freedom, p = 0.001
    # not balanced by construction between even and odd items (DuckDB's hash() was)
    assert freq[::2].sum() != freq[1::2].sum()
    # P(drawn at least once) = 1 - (1 - 1/n)^n
    assert (w > 0).mean() == pytest.approx(1 - 0.9**10, abs=0.01)
    # another language, population or seed draws other resamples
    assert not np.array_equal(w, counts[("d", "de")])
    assert not np.array_equal(w, benchmark_counts(con, "pool", "m")[("d", "en")])
    other = _units_db(tmp_path / "b", {"en": n}, reps, seed=7)
    assert not np.array_equal(w, benchmark_counts(other, "selected", "m")[("d", "en")])
    assert MetricSettings().bootstrap_replicates == 1000


def test_row_quantiles_equal_numpy_with_and_without_missing_replicates():
    rng = np.random.default_rng(0)
    x = rng.random((4, 50))
    x[1, :7] = np.nan
    x[3] = np.nan
    lo, hi = row_quantiles(x, (0.025, 0.975))
    for r in range(3):
        want = np.quantile(x[r][np.isfinite(x[r])], [0.025, 0.975])
        assert (lo[r], hi[r]) == (pytest.approx(want[0]), pytest.approx(want[1]))
    assert np.isnan(lo[3]) and np.isnan(hi[3])


# The rates' percentile intervals as the SQL join that the matrix products replaced: every item
# value times every replicate's draw count, summed per checkpoint x benchmark x metric x
# replicate, pooled rows summed over benchmarks, then quantile_cont.
JOIN_INTERVALS = """
WITH per_benchmark AS (
    SELECT v.population, v.model, v.method, v.structure, v.sparsity, v.dataset, v.lang, v.metric,
           w.b, sum(w.w * v.value) AS s, sum(w.w) AS n
    FROM item_values v
    JOIN bootstrap_weights w USING (population, model, dataset, lang, item_id)
    GROUP BY ALL
),
replicates AS (
    SELECT population, model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric, b,
           sum(s) / sum(n) AS value
    FROM per_benchmark
    GROUP BY GROUPING SETS (
        (population, model, method, structure, sparsity, dataset, lang, metric, b),
        (population, model, method, structure, sparsity, metric, b))
)
SELECT population, model, method, structure, sparsity, dataset, lang, metric,
       count(*) AS n_boot,
       quantile_cont(value, {lo}) AS ci_low, quantile_cont(value, {hi}) AS ci_high
FROM replicates
GROUP BY ALL
"""


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_matrix_intervals_equal_the_sql_join(tmp_path, level):
    """Random outcomes on two languages of different sizes, MC-only items with recovery decodes
    (small denominators: some replicates draw none of them), every rate and pooled row; at the
    default level and at metrics.ci_level 0.8 (the (1 -/+ level) / 2 quantiles)."""
    rng = np.random.default_rng(3)
    rows, selected = [], {}
    for lang, n in (("en", 23), ("de", 9)):
        ids = [f"{lang}{i:02d}" for i in range(n)]
        selected[lang] = ids
        for i in ids:
            rows += [
                row("dense", i, "open", True, lang=lang),
                row("dense", i, "mc", True, lang=lang),
            ]
            rows.append(row("dense", i, "candidates", bool(rng.random() < 0.8), lang=lang))
            open_ok, mc_ok = bool(rng.random() < 0.5), bool(rng.random() < 0.8)
            rows += [
                row("w", i, "open", open_ok, rank=int(rng.integers(1, 20)), lang=lang),
                row("w", i, "mc", mc_ok, lang=lang),
                row("w", i, "candidates", bool(rng.random() < 0.6), lang=lang),
            ]
            if mc_ok and not open_ok:
                rows += [
                    row("w", i, "open", bool(rng.random() < 0.3), "beam", k, lang=lang)
                    for k in range(5)
                ]
                rows.append(row("w", i, "oneshot", bool(rng.random() < 0.3), lang=lang))
    con = build(tmp_path, rows, selected, bootstrap_replicates=300, ci_level=level)
    key = "population, model, method, structure, sparsity, dataset, lang, metric"
    sql = JOIN_INTERVALS.format(lo=(1 - level) / 2, hi=(1 + level) / 2)
    want = {r[:8]: r[8:] for r in con.execute(sql).fetchall()}
    # rate_intervals: the bootstrap of every rate, whichever interval `rates` shows
    got = {
        r[:8]: r[8:]
        for r in con.execute(
            f"SELECT {key}, n_boot, ci_low, ci_high FROM rate_intervals WHERE n_boot > 0"
        ).fetchall()
    }
    assert len(got) > 100 and set(got) == set(want)
    assert any(k[5] == "all" for k in got) and any(v[0] < 300 for v in want.values())
    for k, (n_boot, lo, hi) in want.items():
        assert got[k] == (n_boot, pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12)), k
    # `rates` shows it where ci_method = 'bootstrap' (the rescaled rates and the shares frecm_*)
    shown = con.execute(
        f"SELECT {key}, n_boot, ci_low, ci_high FROM rates WHERE ci_method = 'bootstrap'"
    ).fetchall()
    assert len(shown) > 10 and any("guess_adj" in r[7] for r in shown)
    for r in shown:
        assert r[8:] == got[r[:8]], r[:8]


def test_row_quantiles_equal_duckdbs_quantile_cont_on_short_and_empty_rows():
    """Rows with 0, 1, 2, 3 and 6 finite values (NaN elsewhere) and one without NaN, at the
    quantiles 0, 0.025, 0.5, 0.975 and 1: DuckDB's quantile_cont is the reference (what the
    intervals replaced)."""
    import duckdb

    nan = np.nan
    x = np.array(
        [
            [nan, nan, nan, nan, nan, nan],
            [nan, 0.7, nan, nan, nan, nan],
            [0.9, nan, 0.1, nan, nan, nan],
            [0.3, 0.8, nan, 0.2, nan, nan],
            [0.5, 0.25, 1.0, 0.0, 0.75, 0.6],
            [nan, 0.5, 0.25, 1.0, 0.0, 0.75],
        ]
    )
    probs = (0.0, 0.025, 0.5, 0.975, 1.0)
    got = row_quantiles(x, probs)
    con = duckdb.connect()
    for r in range(x.shape[0]):
        vals = [float(v) for v in x[r] if np.isfinite(v)]
        for k, q in enumerate(probs):
            if not vals:
                assert np.isnan(got[k][r]), (r, q)
                continue
            want = con.execute(
                "SELECT quantile_cont(v, ?) FROM unnest(?::DOUBLE[]) t(v)", [q, vals]
            ).fetchone()[0]
            assert got[k][r] == pytest.approx(want, abs=1e-12), (r, q)


def test_intervals_leave_out_replicates_without_a_denominator():
    """Replicate rates are sum / denominator; a replicate whose draw holds no item of the metric
    (denominator 0) has no rate and does not count in n_boot. Worked by hand: column 0 has the
    rates 1/2, -, 1/4, 1/1; column 1 has none."""
    from benchmark_illusion.metrics.bootstrap import replicate_intervals

    sums = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    counts = np.array([[2.0, 0.0], [0.0, 0.0], [4.0, 0.0], [1.0, 0.0]])
    n_boot, lo, hi = replicate_intervals(sums, counts, (0.0, 1.0))
    assert n_boot.tolist() == [3, 0]
    assert (lo[0], hi[0]) == (0.25, 1.0) and np.isnan(lo[1]) and np.isnan(hi[1])
    # the median of 1/4, 1/2, 1 is 1/2
    assert replicate_intervals(sums, counts, (0.5, 0.5))[1][0] == 0.5
