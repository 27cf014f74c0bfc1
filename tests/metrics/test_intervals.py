"""The closed-form intervals of the rates (benchmark_illusion.metrics.exact and the SQL macros of
workflow/sql/25_rates.sql): their formulas on worked examples, their coverage at the item counts
of a default run (14-22 items per benchmark) against the intervals they replace, and which rate
gets which interval."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import duckdb
import pytest

from benchmark_illusion.metrics import exact
from benchmark_illusion.metrics.exact import (
    bonett_price,
    coverage,
    newcombe_difference,
    wilson,
    z_of,
)
from metrics.test_sql import DENSE, POOL, PRUNED, build

ROOT = Path(__file__).resolve().parents[2]
RATES_SQL = ROOT / "workflow/sql/25_rates.sql"

# --- the formulas --------------------------------------------------------------------------------


def test_z_of_is_the_two_sided_normal_quantile():
    assert z_of(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert z_of(0.8) == pytest.approx(1.281552, abs=1e-6)
    assert z_of(0.99) == pytest.approx(2.575829, abs=1e-6)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="level"):
            z_of(bad)


def test_wilson_worked_by_hand_and_newcombes_examples():
    # 3 of 22 at 95%, z = 1.959964, z^2 = 3.841459: centre (3 + 1.920729) / 25.841459 = 0.190420;
    # half-width 1.959964 / 25.841459 * sqrt(3 * 19 / 22 + 0.960365) = 0.142930
    assert wilson(3, 22) == (pytest.approx(0.047490, abs=1e-6), pytest.approx(0.333350, abs=1e-6))
    # Newcombe (1998), Stat Med 17:857, Table II, method 3 (the score interval), 4 decimals
    for (k, n), (lo, hi) in {
        (81, 263): (0.2553, 0.3662),
        (15, 148): (0.0624, 0.1605),
        (0, 20): (0.0, 0.1611),
        (1, 29): (0.0061, 0.1718),
    }.items():
        got = wilson(k, n)
        assert (round(got[0], 4), round(got[1], 4)) == (lo, hi), (k, n)
    # 0 of n: [0, z^2 / (n + z^2)]; n of n mirrors it; never outside [0, 1]
    z2 = z_of(0.95) ** 2
    assert wilson(0, 14) == (0.0, pytest.approx(z2 / (14 + z2)))
    assert wilson(14, 14) == (pytest.approx(14 / (14 + z2)), 1.0)
    for n in range(1, 41):
        for k in range(n + 1):
            lo, hi = wilson(k, n)
            lo2, hi2 = wilson(n - k, n)
            assert 0 <= lo <= k / n <= hi <= 1
            assert (lo, hi) == (pytest.approx(1 - hi2), pytest.approx(1 - lo2))
    # a fractional count (averaged over replicates) lies between its neighbours
    assert wilson(2, 10)[0] < wilson(2.5, 10)[0] < wilson(3, 10)[0]
    assert all(math.isnan(x) for x in wilson(0, 0))
    # a lower level, a narrower interval
    assert wilson(3, 22, 0.8)[0] > wilson(3, 22)[0] and wilson(3, 22, 0.8)[1] < wilson(3, 22)[1]


def test_bonett_price_worked_by_hand_and_the_published_example():
    # 22 pairs, 5 discordant +1 and 1 discordant -1: p12 = 6/24 = 0.25, p21 = 2/24, d = 1/6,
    # se = sqrt((1/3 - 1/36) / 24) = sqrt(11/864) = 0.112834, z * se = 0.221151
    assert bonett_price(5, 1, 22) == (
        pytest.approx(1 / 6 - 0.221151, abs=1e-6),
        pytest.approx(1 / 6 + 0.221151, abs=1e-6),
    )
    # Bonett & Price (2012), Example 1: 200 pairs, 50 and 22 discordant: 0.0574 to 0.2199
    lo, hi = bonett_price(50, 22, 200)
    assert (round(lo, 4), round(hi, 4)) == (0.0574, 0.2199)
    # statpsych's ci.prop.ps (Bonett's own implementation), its documented example: 48 pairs,
    # 26 and 4 discordant: 0.2548067 to 0.6251933
    assert bonett_price(26, 4, 48) == (
        pytest.approx(0.2548067, abs=1e-7),
        pytest.approx(0.6251933, abs=1e-7),
    )
    # the other direction mirrors it; no discordant pair: symmetric about 0, not a point
    assert bonett_price(22, 50, 200) == (pytest.approx(-hi), pytest.approx(-lo))
    half = z_of(0.95) * math.sqrt((2 / 16) / 16)  # n = 14: p12 = p21 = 1/16
    assert bonett_price(0, 0, 14) == (pytest.approx(-half), pytest.approx(half))
    # clamped to [-1, 1]; the estimate (b - c) / n inside at the 95% level for every n <= 40
    assert bonett_price(14, 0, 14)[1] == 1.0 and bonett_price(0, 14, 14)[0] == -1.0
    for n in range(1, 41):
        for b in range(n + 1):
            for c in range(n + 1 - b):
                lo, hi = bonett_price(b, c, n)
                assert -1 <= lo <= (b - c) / n <= hi <= 1, (b, c, n)
    assert all(math.isnan(x) for x in bonett_price(0, 0, 0))


def test_newcombe_difference_on_newcombes_examples():
    # Newcombe (1998), Stat Med 17:873, Table II, method 10 (the hybrid score interval)
    for args, (lo, hi) in {
        (56, 70, 48, 80): (0.0524, 0.3339),
        (9, 10, 3, 10): (0.1705, 0.8090),
        (5, 56, 0, 29): (-0.0381, 0.1926),
        (0, 10, 0, 20): (-0.1611, 0.2775),
        (10, 10, 0, 20): (0.6791, 1.0),
    }.items():
        got = newcombe_difference(*args)
        assert (round(got[0], 4), round(got[1], 4)) == (lo, hi), args
    assert all(math.isnan(x) for x in newcombe_difference(1, 0, 1, 3))


# --- coverage -------------------------------------------------------------------------------------

# the default run's items per checkpoint and benchmark (14-22), and a larger benchmark
SIZES = (14, 22, 40)
P_GRID = [i / 100 for i in range(2, 99)]  # 0.02 .. 0.98
P_MIDDLE = [p for p in P_GRID if 0.1 <= p <= 0.9]
# (p12, p21): the chances of a pair being discordant either way, over the whole simplex
PAIRED_GRID = [
    (0.025 + 0.05 * i, 0.025 + 0.05 * j) for i in range(20) for j in range(20) if i + j <= 18
]
# (p1, p2) of two independent proportions
TWO_GRID = [(0.05 * i, 0.05 * j) for i in range(1, 20) for j in range(1, 20)]


def _mean(xs):
    return sum(xs) / len(xs)


def test_coverage_enumeration_agrees_with_a_seeded_simulation():
    """The exact coverage (a sum over every outcome) against 20000 simulated samples."""
    rng = random.Random(7)
    reps = 20000
    for method, n, p in (("wilson", 14, 0.3), ("wald", 22, 0.1)):
        hits = 0
        for _ in range(reps):
            k = sum(rng.random() < p for _ in range(n))
            lo, hi = exact.ONE_SAMPLE[method](k, n, 0.95)
            hits += lo <= p <= hi
        assert coverage(method, n, [p])[0] == pytest.approx(hits / reps, abs=0.01)
    n, (p12, p21) = 14, (0.2, 0.05)
    hits = 0
    for _ in range(reps):
        u = [rng.random() for _ in range(n)]
        b, c = sum(x < p12 for x in u), sum(p12 <= x < p12 + p21 for x in u)
        lo, hi = bonett_price(b, c, n)
        hits += lo <= p12 - p21 <= hi
    assert coverage("bonett_price", n, [(p12, p21)])[0] == pytest.approx(hits / reps, abs=0.01)
    with pytest.raises(ValueError, match="unknown method"):
        coverage("nope", 10, [0.5])


@pytest.mark.parametrize("n", SIZES)
def test_wilson_keeps_its_level_where_the_bootstrap_and_wald_do_not(n):
    """At 95%: Wilson's coverage averages at least 0.94 over p in 0.02..0.98 and stays at or
    above 0.90 for p in [0.1, 0.9]. The percentile bootstrap (its many-replicate limit, with the
    exact interval at 0/n and n/n) and the Wald interval fail the same test: their coverage
    falls below 0.90 inside [0.1, 0.9], Wald's also on average."""
    wil = coverage("wilson", n, P_GRID)
    assert _mean(wil) >= 0.94
    assert min(coverage("wilson", n, P_MIDDLE)) >= 0.90
    boot = coverage("percentile_bootstrap", n, P_MIDDLE)
    assert min(boot) < 0.90
    wald = coverage("wald", n, P_GRID)
    assert _mean(wald) < 0.92 and min(coverage("wald", n, P_MIDDLE)) < 0.87


@pytest.mark.parametrize("n", SIZES)
def test_bonett_price_keeps_its_level_on_paired_differences(n):
    """Over (p12, p21) across the simplex: Bonett-Price's coverage averages at least 0.93 and
    never falls below 0.92; the unadjusted paired Wald interval fails the same test (below 0.87
    where the pairs are rarely discordant one way)."""
    bp = coverage("bonett_price", n, PAIRED_GRID)
    assert _mean(bp) >= 0.93 and min(bp) >= 0.92
    wald = coverage("paired_wald", n, PAIRED_GRID)
    assert _mean(wald) < _mean(bp) - 0.02 and min(wald) < 0.87


@pytest.mark.parametrize("n", SIZES)
def test_newcombe_keeps_its_level_on_independent_differences(n):
    cov = coverage("newcombe", n, TWO_GRID)
    assert _mean(cov) >= 0.94 and min(cov) >= 0.92


# --- the SQL macros ------------------------------------------------------------------------------


def _macros(con):
    """Run the CREATE MACRO statements of 25_rates.sql (comments dropped) on con."""
    text = "\n".join(
        line for line in RATES_SQL.read_text().splitlines() if not line.lstrip().startswith("--")
    )
    statements = [s.strip() for s in text.split(";")]
    macros = [s for s in statements if re.match(r"CREATE OR REPLACE MACRO _?(wilson|bonett)", s)]
    assert len(macros) == 6
    for s in macros:
        con.execute(s)


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_sql_macros_equal_the_python_functions(level):
    con = duckdb.connect()
    _macros(con)
    z = z_of(level)
    grid = [
        (k, n) for n in (*range(1, 41), 100, 263) for k in range(n + 1) if n <= 40 or k % 7 == 0
    ]
    grid += [(2.5, 10), (0.3, 1), (13.75, 14)]
    rows = con.execute(
        "SELECT wilson_low(k, n, $z), wilson_high(k, n, $z) "
        "FROM (SELECT unnest($k::DOUBLE[]) AS k, unnest($n::DOUBLE[]) AS n)",
        {"z": z, "k": [g[0] for g in grid], "n": [float(g[1]) for g in grid]},
    ).fetchall()
    for (k, n), (lo, hi) in zip(grid, rows, strict=True):
        assert (lo, hi) == (
            pytest.approx(wilson(k, n, level)[0], abs=1e-12),
            pytest.approx(wilson(k, n, level)[1], abs=1e-12),
        ), (k, n)
    pairs = [(b, c, n) for n in range(1, 41) for b in range(n + 1) for c in range(n + 1 - b)]
    pairs += [(50, 22, 200), (0, 0, 1000)]
    rows = con.execute(
        "SELECT bonett_price_low(b, c, n, $z), bonett_price_high(b, c, n, $z) FROM (SELECT "
        "unnest($b::BIGINT[]) AS b, unnest($c::BIGINT[]) AS c, unnest($n::BIGINT[]) AS n)",
        {
            "z": z,
            "b": [p[0] for p in pairs],
            "c": [p[1] for p in pairs],
            "n": [p[2] for p in pairs],
        },
    ).fetchall()
    for (b, c, n), (lo, hi) in zip(pairs, rows, strict=True):
        want = bonett_price(b, c, n, level)
        assert (lo, hi) == (pytest.approx(want[0], abs=1e-12), pytest.approx(want[1], abs=1e-12))
    # no item: no interval
    assert con.execute(
        "SELECT wilson_low(0, 0, 1.96), wilson_high(0, 0, 1.96), bonett_price_low(0, 0, 0, 1.96)"
    ).fetchone() == (None, None, None)


# --- which rate gets which interval ---------------------------------------------------------------


def _rates_of(values: list[tuple], level: float = 0.95):
    """25_rates.sql alone on hand-made item values (lang, item_id, metric, value) of one
    checkpoint, with a stand-in rate_intervals of [-9, 9] on every rate: the rows whose
    interval is the bootstrap's show it."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE item_values (population VARCHAR, model VARCHAR, method VARCHAR, "
        "structure VARCHAR, sparsity DOUBLE, dataset VARCHAR, lang VARCHAR, item_id VARCHAR, "
        "metric VARCHAR, value DOUBLE)"
    )
    con.executemany(
        "INSERT INTO item_values "
        "VALUES ('selected', 'm', 'w', 'unstructured', 0.5, 'd', ?, ?, ?, ?)",
        values,
    )
    con.execute(
        "CREATE TABLE rate_intervals AS SELECT population, model, method, structure, sparsity, "
        "coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric, "
        "7::BIGINT AS n_boot, -9.0 AS ci_low, 9.0 AS ci_high FROM item_values "
        "GROUP BY GROUPING SETS ((population, model, method, structure, sparsity, dataset, lang, "
        "metric), (population, model, method, structure, sparsity, metric))"
    )
    for name, value in {
        "bootstrap_seed": 1,
        "bootstrap_replicates": 7,
        "ci_level": level,
        "ci_z": z_of(level),
    }.items():
        con.execute(f"SET VARIABLE {name} = {value!r}")
    con.execute(RATES_SQL.read_text())
    return {
        (r[0], r[1]): r[2:]
        for r in con.execute(
            "SELECT metric, lang, n_items, value, ci_low, ci_high, ci_method FROM rates"
        ).fetchall()
    }


def _items(lang, metric, values):
    return [(lang, f"{lang}{i}", metric, v) for i, v in enumerate(values)]


def test_each_kind_of_metric_gets_its_interval():
    third = 1 / 3
    values = [
        # a proportion: Wilson per language and on the pooled count (3 of 7)
        *_items("en", "acc_mc", [1, 0, 0, 1]),
        *_items("de", "acc_mc", [0, 0, 1]),
        # a paired difference of proportions: Bonett-Price of b = count(1), c = count(-1)
        *_items("en", "drop_mc", [1, 1, 0, -1]),
        *_items("de", "drop_mc", [0, 0, 0]),
        *_items("en", "sent_delta_pr", [0, -1, 0, 0]),
        *_items("de", "sent_delta_pr", [1, 1, 1]),
        # rescaled: the bootstrap, even where every value is 0 (no exact bound)
        *_items("en", "mc_only_guess_adj", [0.75, -0.25, 0, 0]),
        *_items("de", "mc_only_guess_adj", [0, 0, 0]),
        *_items("en", "acc_mc_chance_adj", [1, 1, 1, 1]),
        # a share (values other than 0 and 1 somewhere): the bootstrap, and where it is 0 on
        # every item the exact bound; all its rows one kind, so de is not a proportion
        *_items("en", "frecm_oracle", [third, 0]),
        *_items("de", "frecm_oracle", [0, 0]),
        # a difference with values other than -1, 0, 1: the bootstrap, +/- the bound at 0
        *_items("en", "drop_other", [0.5, -1]),
        *_items("de", "drop_other", [0, 0]),
        # a proportion whose items all have the same value: still Wilson
        *_items("en", "top1_mc_only", [0, 0]),
        *_items("de", "top1_mc_only", [1]),
    ]
    got = _rates_of(values)
    w, bp = wilson, bonett_price

    def rate(metric, lang, n, value, interval, method):
        want = (n, pytest.approx(value), pytest.approx(interval[0]), pytest.approx(interval[1]))
        assert got[(metric, lang)] == (*want, method), (metric, lang)

    rate("acc_mc", "en", 4, 0.5, w(2, 4), "wilson")
    rate("acc_mc", "de", 3, 1 / 3, w(1, 3), "wilson")
    rate("acc_mc", "all", 7, 3 / 7, w(3, 7), "wilson")
    rate("drop_mc", "en", 4, 0.25, bp(2, 1, 4), "bonett_price")
    rate("drop_mc", "de", 3, 0.0, bp(0, 0, 3), "bonett_price")
    rate("drop_mc", "all", 7, 1 / 7, bp(2, 1, 7), "bonett_price")
    rate("sent_delta_pr", "en", 4, -0.25, bp(0, 1, 4), "bonett_price")
    rate("sent_delta_pr", "all", 7, 2 / 7, bp(3, 1, 7), "bonett_price")
    rate("mc_only_guess_adj", "en", 4, 0.125, (-9, 9), "bootstrap")
    rate("mc_only_guess_adj", "de", 3, 0.0, (-9, 9), "bootstrap")
    rate("acc_mc_chance_adj", "en", 4, 1.0, (-9, 9), "bootstrap")
    bound2 = 1 - 0.025 ** (1 / 2)
    rate("frecm_oracle", "en", 2, third / 2, (-9, 9), "bootstrap")
    rate("frecm_oracle", "de", 2, 0.0, (0.0, bound2), "exact")
    rate("frecm_oracle", "all", 4, third / 4, (-9, 9), "bootstrap")
    rate("drop_other", "en", 2, -0.25, (-9, 9), "bootstrap")
    rate("drop_other", "de", 2, 0.0, (-bound2, bound2), "exact")
    rate("top1_mc_only", "en", 2, 0.0, w(0, 2), "wilson")
    rate("top1_mc_only", "de", 1, 1.0, w(1, 1), "wilson")
    # the level's quantile comes from ci_z
    lo80 = _rates_of(values, 0.8)[("acc_mc", "all")][2]
    assert lo80 == pytest.approx(w(3, 7, 0.8)[0]) and lo80 > w(3, 7)[0]


def test_the_pipeline_sets_ci_z_and_the_rates_use_it(tmp_path):
    """The whole aggregation on the hand-built logs of tests/metrics/test_sql.py: proportions get
    Wilson, drops and Delta_PR Bonett-Price, the rescaled rates the bootstrap of
    rate_intervals; at metrics.ci_level 0.8 too."""
    for level in (0.95, 0.8):
        (tmp_path / str(level)).mkdir()
        con = build(
            tmp_path / str(level),
            DENSE + PRUNED,
            {"en": ["i1", "i2", "i3", "i4"]},
            POOL,
            ci_level=level,
            bootstrap_replicates=50,
        )
        assert con.execute("SELECT getvariable('ci_z')::DOUBLE").fetchone()[0] == pytest.approx(
            z_of(level)
        )
        got = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT metric, ci_low, ci_high, ci_method FROM rates "
                "WHERE method = 'w' AND lang = 'en'"
            ).fetchall()
        }
        # open [0,0,0,1]: 1 of 4; drop_open [1,1,1,0]: b = 3, c = 0; delta_pr [1,0,0,0]
        for metric, want, method in (
            ("acc_open", wilson(1, 4, level), "wilson"),
            ("mc_only", wilson(2, 4, level), "wilson"),
            ("demoted", wilson(2, 3, level), "wilson"),
            ("drop_open", bonett_price(3, 0, 4, level), "bonett_price"),
            ("delta_pr", bonett_price(1, 0, 4, level), "bonett_price"),
        ):
            assert got[metric] == (pytest.approx(want[0]), pytest.approx(want[1]), method)
        boot = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT metric, ci_low, ci_high FROM rate_intervals "
                "WHERE method = 'w' AND lang = 'en' AND population = 'selected'"
            ).fetchall()
        }
        for metric in ("mc_only_guess_adj", "acc_mc_chance_adj"):
            assert got[metric] == (*boot[metric], "bootstrap")
        # the pool's rates too: top5_dense_failed, 1 of the 2 ranked failed items
        assert con.execute(
            "SELECT ci_low, ci_high, ci_method FROM rates WHERE population = 'pool' "
            "AND metric = 'top5_dense_failed' AND lang = 'en'"
        ).fetchone() == (*[pytest.approx(x) for x in wilson(1, 2, level)], "wilson")
