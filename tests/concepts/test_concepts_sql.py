"""The competency-gap tables (workflow/sql/concepts/) on a hand-built fixture.

Logs: the 4-item / 7-item-pool fixture of metrics/test_sql.py (benchmark d/en; pruned checkpoint
'w').
Concepts: 4 latents. Activations a_c(x):
  d/en (7 items):  c0: i1 2.0, i2 1.0, i5 1.0   c1: i3 1.0, i4 3.0
                   c2: i1 0.5, i3 0.5, i6 1.0   c3: -
  d/es (2 items):  c0: j2 1.0                   c3: j1 1.0
Every expected value below is worked out by hand in the comments.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest

from benchmark_illusion.concepts.gap_settings import GapSettings
from benchmark_illusion.concepts.gaps import (
    load_concept_tables,
    run_concept_sql,
    stability,
)
from benchmark_illusion.concepts.steps import build_gaps_database
from benchmark_illusion.metrics.figures.names import CONCEPT_FIGURES
from benchmark_illusion.metrics.steps import make_figures
from metrics.test_sql import DENSE, POOL, PRUNED, build

ROOT = Path(__file__).resolve().parents[2]
CONCEPT_SQL = sorted(str(p) for p in (ROOT / "workflow/sql/concepts").glob("*.sql"))

ACTS = [
    ("en", "i1", 0, 2.0),
    ("en", "i2", 0, 1.0),
    ("en", "i5", 0, 1.0),
    ("en", "i3", 1, 1.0),
    ("en", "i4", 1, 3.0),
    ("en", "i1", 2, 0.5),
    ("en", "i3", 2, 0.5),
    ("en", "i6", 2, 1.0),
    ("es", "j2", 0, 1.0),
    ("es", "j1", 3, 1.0),
]
ITEMS = {"en": [f"i{k}" for k in range(1, 8)], "es": ["j1", "j2"]}


def concept_files(tmp_path, acts=ACTS, items=ITEMS, n_concepts=4):
    """The three concept files of one model: activations (acts: (lang, item, concept, value)),
    token counts of `items` (lang -> ids), labels of n_concepts concepts; returns their paths."""
    a = pl.DataFrame(
        [
            {
                "model": "m",
                "dataset": "d",
                "lang": lang,
                "item_id": i,
                "concept": c,
                "activation": v,
            }
            for lang, i, c, v in acts
        ],
        schema={
            "model": pl.Utf8,
            "dataset": pl.Utf8,
            "lang": pl.Utf8,
            "item_id": pl.Utf8,
            "concept": pl.Int32,
            "activation": pl.Float32,
        },
    )
    t = pl.DataFrame(
        [
            {
                "model": "m",
                "dataset": "d",
                "lang": lang,
                "item_id": i,
                "n_tokens": 10,
                "n_excluded": 0,
            }
            for lang, ids in items.items()
            for i in ids
        ]
    )
    lab = pl.DataFrame(
        {
            "model": ["m"] * n_concepts,
            "concept": list(range(n_concepts)),
            "label": [f"c{c}" for c in range(n_concepts)],
            "llm_label": [None] * n_concepts,
            "n_fired": [5] * n_concepts,
        },
        schema_overrides={"concept": pl.Int32, "llm_label": pl.Utf8},
    )
    paths = [tmp_path / "a.parquet", tmp_path / "t.parquet", tmp_path / "l.parquet"]
    for df, p in zip((a, t, lab), paths, strict=True):
        df.write_parquet(p)
    return [str(p) for p in paths]


DEFAULT_GAPS = GapSettings(min_support=2)  # gaps_db's default settings


def gaps_db(tmp_path, settings=DEFAULT_GAPS, acts=ACTS):
    con = build(tmp_path, DENSE + PRUNED, {"en": ["i1", "i2", "i3", "i4"]}, pool=POOL)
    a, t, lab = concept_files(tmp_path, acts)
    load_concept_tables(con, [a], [t], [lab])
    run_concept_sql(con, CONCEPT_SQL, settings)
    return con


@pytest.fixture
def con(tmp_path):
    return gaps_db(tmp_path)


REPORT_VIEWS = (
    "report_concept_sae",
    "report_best_covered",
    "report_least_covered",
    "report_dense_gaps",
    "report_damaged_concepts",
    "report_concept_damage",
    "report_damage_criteria",
)


def values(con, sql):
    return {r[0]: r[1:] if len(r) > 2 else r[1] for r in con.execute(sql).fetchall()}


def test_chi_bench_by_hand(con):
    # en: total 10 over 7 items x 4 concepts -> grand mean 10/28; chi = (sum_c / 7) / (10/28)
    #   c0 = (4/7)/(10/28) = 1.6, c1 = 1.6, c2 = (2/7)/(10/28) = 0.8, c3 = 0
    en = values(con, "SELECT concept, chi_bench FROM chi_bench WHERE lang = 'en'")
    assert en == pytest.approx({0: 1.6, 1: 1.6, 2: 0.8, 3: 0.0})
    # es: total 2 over 2 items x 4 -> 0.25; c0 = c3 = (1/2)/0.25 = 2
    es = values(con, "SELECT concept, chi_bench FROM chi_bench WHERE lang = 'es'")
    assert es == pytest.approx({0: 2.0, 1: 0.0, 2: 0.0, 3: 2.0})
    # across benchmarks: the mean over en and es
    across = values(con, "SELECT concept, chi_bench FROM chi_bench WHERE lang = 'all'")
    assert across == pytest.approx({0: 1.8, 1: 0.8, 2: 0.4, 3: 1.0})
    n = values(con, "SELECT concept, n_active, n_items FROM chi_bench WHERE lang = 'all'")
    assert n == {0: (4, 9), 1: (2, 9), 2: (3, 9), 3: (1, 9)}


def test_coverage_classes_by_hand(con):
    # en, active [0.8, 1.6, 1.6]: q10 = 0.8 + 0.2*0.8 = 0.96, q90 = 1.6
    # -> c2 under, c0 c1 over, c3 missing
    en = values(con, "SELECT concept, coverage FROM chi_bench WHERE lang = 'en'")
    assert en == {0: "over", 1: "over", 2: "under", 3: "missing"}
    # across, [0.4, 0.8, 1.0, 1.8]: q10 = 0.4 + 0.3*0.4 = 0.52, q90 = 1.0 + 0.7*0.8 = 1.56
    across = values(con, "SELECT concept, coverage FROM chi_bench WHERE lang = 'all'")
    assert across == {0: "over", 1: "typical", 2: "under", 3: "typical"}
    t = con.execute(
        "SELECT DISTINCT under_threshold, over_threshold FROM chi_bench WHERE lang = 'all'"
    ).fetchall()
    assert t == [pytest.approx((0.52, 1.56))]
    gaps = con.execute("SELECT lang, coverage, concept FROM coverage_gaps ORDER BY ALL").fetchall()
    assert (
        ("en", "missing", 3) in gaps
        and ("all", "under", 2) in gaps
        and ("all", "typical", 1) not in gaps
    )


def test_coverage_quantiles_come_from_the_config(tmp_path):
    con = gaps_db(tmp_path, GapSettings(under_quantile=0.5, over_quantile=0.99, min_support=2))
    # across, q50 of [0.4, 0.8, 1.0, 1.8] = 0.9: c2 and c1 under;
    # q99 = 1.0 + 0.97*0.8 = 1.776: c0 over
    across = values(con, "SELECT concept, coverage FROM chi_bench WHERE lang = 'all'")
    assert across == {0: "over", 1: "under", 2: "under", 3: "typical"}


def test_chi_model_by_hand(con):
    # pruned w on the selected items: open right only on i4; mc right on i1, i2, i4
    q = """SELECT concept, chi_model, support FROM chi_model WHERE population = 'selected' \
AND method = 'w'
           AND format = '{}' AND lang = 'en'"""
    # c0: i1 (2), i2 (1) -> open 0, mc (2+1)/3 = 1; c1: i3 (1), i4 (3) -> open 3/4, mc 3/4;
    # c2: i1 (.5), i3 (.5) -> open 0, mc .5/1 = .5
    assert values(con, q.format("open")) == {0: (0.0, 2), 1: (0.75, 2), 2: (0.0, 2)}
    assert values(con, q.format("mc")) == {0: (1.0, 2), 1: (0.75, 2), 2: (0.5, 2)}
    # dense candidates: wrong on i4 only -> c1 = (1*1 + 3*0)/4 = 0.25
    dense_cand = values(
        con,
        """SELECT concept, chi_model FROM chi_model WHERE population = 'selected'
                                AND method = 'dense' AND format = 'candidates' AND lang = 'en'""",
    )
    assert dense_cand == pytest.approx({0: 1.0, 1: 0.25, 2: 1.0})
    # dense on the pool: open wrong on i5, i6, i7 -> c0 = (2+1+0)/4 = .75, c2 = (.5+.5+0)/2 = .5;
    # mc right on i5, wrong on i6 -> c0 = 1, c2 = (.5+.5)/2 = .5
    pool = values(
        con,
        """SELECT concept || format, chi_model FROM chi_model WHERE population = 'pool'
                          AND lang = 'en' AND format IN ('open', 'mc') AND concept IN (0, 2)""",
    )
    assert pool == pytest.approx({"0open": 0.75, "2open": 0.5, "0mc": 1.0, "2mc": 0.5})
    # accuracy: w open on the 4 selected items = 1/4; across benchmarks = the same (es has no logs)
    acc = con.execute("""SELECT DISTINCT lang, accuracy, n_items FROM chi_model \
WHERE population = 'selected'
                         AND method = 'w' AND format = 'open' ORDER BY lang""").fetchall()
    assert acc == [("all", 0.25, 4), ("en", 0.25, 4)]
    # es items were never evaluated: no chi_model rows for es
    assert con.execute("SELECT count(*) FROM chi_model WHERE lang = 'es'").fetchone()[0] == 0


def test_min_support_and_model_gaps_by_hand(tmp_path, con):
    # min_support 2: all three concepts supported; bottom 10% of 3 -> ceil(0.3) = 1 concept:
    # w open en: c0 0, c2 0, c1 .75 -> c0 (the tie goes to the lower id)
    g = con.execute("""SELECT gap_rank, concept, chi_model FROM model_gaps \
WHERE population = 'selected'
                       AND method = 'w' AND format = 'open' AND lang = 'en'""").fetchall()
    assert g == [(1, 0, 0.0)]
    (tmp_path / "strict").mkdir()
    strict = gaps_db(tmp_path / "strict", GapSettings(min_support=3))
    # support 3 only on the pool: c0 (i1, i2, i5) and c2 (i1, i3, i6); none on the selected items
    sup = strict.execute(
        "SELECT DISTINCT population, concept FROM chi_model WHERE supported ORDER BY ALL"
    ).fetchall()
    assert sup == [("pool", 0), ("pool", 2)]
    assert (
        strict.execute("SELECT count(*) FROM model_gaps WHERE population = 'selected'").fetchone()[
            0
        ]
        == 0
    )


def test_concept_damage_by_hand(con):
    d = {
        r[0]: r[1:]
        for r in con.execute(
            """SELECT concept, support, mc_only_rate, demoted_rate, erased_rate, damage, \
drop_open, drop_mc,
                  drop_candidates FROM concept_damage WHERE lang = 'en' ORDER BY concept"""
        ).fetchall()
    }
    # c0: i1 (2; MC-only, demoted by a beam), i2 (1; MC-only, erased) -> mc_only 1, demoted 2/3,
    #     erased 1/3; chi open 1 -> 0, mc 1 -> 1; candidates dense 1, w (2*1 + 1*0)/3 = 2/3
    assert d[0] == pytest.approx((2, 1.0, 2 / 3, 1 / 3, "demoted", 1.0, 0.0, 1 / 3))
    # c1: i3 (1; wrong in mc too, one-shot recovers: demoted), i4 (3; correct) -> mc_only 0,
    #     demoted 1/4, erased 0; open 1 -> .75, mc 1 -> .75, candidates .25 -> (0 + 3)/4 = .75
    assert d[1] == pytest.approx((2, 0.0, 0.25, 0.0, "demoted", 0.25, 0.25, -0.5))
    # c2: i1 (.5; MC-only, demoted), i3 (.5; demoted) -> mc_only .5, demoted 1, erased 0
    assert d[2] == pytest.approx((2, 0.5, 1.0, 0.0, "demoted", 1.0, 0.5, 0.5))
    assert 3 not in d  # never active in a selected item
    pooled = con.execute("SELECT count(*) FROM concept_damage WHERE lang = 'all'").fetchone()[0]
    assert pooled == 3
    assert (
        con.execute("SELECT count(*) FROM concept_damage WHERE method = 'dense'").fetchone()[0] == 0
    )


def test_erased_dominates_where_nothing_recovers(tmp_path):
    # Only i2 (MC-only, no decode recovers it) carries concept 0: damage 'erased'
    con = gaps_db(tmp_path, acts=[("en", "i2", 0, 1.0), ("en", "i4", 1, 1.0)])
    d = values(con, "SELECT concept, damage, erased_rate FROM concept_damage WHERE lang = 'en'")
    assert d == {0: ("erased", 1.0), 1: ("none", 0.0)}


def test_a_tie_between_demoted_and_erased_is_mixed(tmp_path):
    # i1 is demoted (a beam recovers it), i2 erased (nothing does); equal activations: a tie
    con = gaps_db(
        tmp_path,
        acts=[
            ("en", "i1", 0, 1.0),
            ("en", "i2", 0, 1.0),
            ("en", "i1", 1, 3.0),
            ("en", "i2", 1, 1.0),
        ],
    )
    d = values(
        con,
        "SELECT concept, damage, demoted_rate, erased_rate FROM concept_damage WHERE lang = 'en'",
    )
    assert d == {0: ("mixed", 0.5, 0.5), 1: ("demoted", 0.75, 0.25)}


def test_a_dense_only_run_has_empty_damage_tests(tmp_path):
    con = build(tmp_path, DENSE, {"en": ["i1", "i2", "i3", "i4"]}, pool=POOL)
    a, t, lab = concept_files(tmp_path)
    load_concept_tables(con, [a], [t], [lab])
    run_concept_sql(con, CONCEPT_SQL, GapSettings(min_support=2))
    assert con.execute("SELECT count(*) FROM concept_damage_tests").fetchall() == [(0,)]
    columns = {r[0] for r in con.execute("DESCRIBE concept_damage").fetchall()}
    assert {"p_open", "q_open", "significant_open", "drop_mc_ci_low", "excess_mc"} <= columns
    db = tmp_path / "illusion.duckdb"
    con.execute(f"ATTACH '{db}' AS out")
    con.execute("COPY FROM DATABASE memory TO out")
    con.execute("DETACH out")
    assert len(make_figures(db, tmp_path / "fig", CONCEPT_FIGURES)) == len(CONCEPT_FIGURES)


def test_stability_is_seeded_and_exact_without_subsampling(tmp_path, con):
    full = stability(
        con, CONCEPT_SQL, GapSettings(min_support=2, stability_fraction=1.0, stability_repeats=2)
    )
    assert full.height > 0 and full["max_abs_change"].max() == pytest.approx(0.0, abs=1e-12)
    s = GapSettings(min_support=1, stability_fraction=0.6, stability_repeats=4, seed=3)
    a, b = stability(con, CONCEPT_SQL, s), stability(con, CONCEPT_SQL, s)
    assert a.equals(b)
    assert a.filter(pl.col("metric") == "chi_bench")["max_abs_change"].max() > 0
    other = stability(
        con,
        CONCEPT_SQL,
        GapSettings(min_support=1, stability_fraction=0.6, stability_repeats=4, seed=4),
    )
    assert not a.equals(other)
    # the main tables are untouched by the subsample runs
    assert values(
        con, "SELECT concept, chi_bench FROM chi_bench WHERE lang = 'en'"
    ) == pytest.approx({0: 1.6, 1: 1.6, 2: 0.8, 3: 0.0})


def test_gap_settings_are_checked():
    with pytest.raises(ValueError, match="under_quantile < over_quantile"):
        GapSettings(under_quantile=0.9, over_quantile=0.1).check()


def test_gaps_database_keeps_the_metric_tables(tmp_path):
    con = build(tmp_path, DENSE + PRUNED, {"en": ["i1", "i2", "i3", "i4"]}, pool=POOL)
    stage = tmp_path / "metrics.duckdb"
    con.execute(f"ATTACH '{stage}' AS stage")
    con.execute("CREATE TABLE stage.mc_only AS SELECT * FROM mc_only")
    con.execute("CREATE TABLE stage.item_outcomes AS SELECT * FROM item_outcomes")
    con.execute("CREATE TABLE stage.bootstrap_units AS SELECT * FROM bootstrap_units")
    con.execute("CREATE TABLE stage.bootstrap_benchmarks AS SELECT * FROM bootstrap_benchmarks")
    con.execute("CREATE TABLE stage.checkpoints AS SELECT * FROM checkpoints")
    con.execute(
        "CREATE VIEW stage.pool AS SELECT * FROM read_parquet('"
        + str(tmp_path / "p.parquet")
        + "')"
    )
    con.execute("DETACH stage")
    a, t, lab = concept_files(tmp_path)
    build_gaps_database(
        stage,
        tmp_path / "illusion.duckdb",
        activations=[a],
        tokens=[t],
        labels=[lab],
        sql_files=CONCEPT_SQL,
        settings=GapSettings(min_support=2, stability_repeats=2),
    )
    out = duckdb.connect(str(tmp_path / "illusion.duckdb"), read_only=True)
    tables = {
        r[0] for r in out.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    assert {
        "mc_only",
        "item_outcomes",
        "chi_bench",
        "coverage_gaps",
        "chi_model",
        "model_gaps",
        "concept_damage",
        "concept_stability",
        "concept_activations",
        "concept_labels",
    } <= tables
    assert out.execute("SELECT count(*) FROM concept_stability").fetchone()[0] > 0
    views = {
        r[0]
        for r in out.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    }
    assert set(REPORT_VIEWS) <= views
    # the stability subsamples leave no schema behind, and their runs defined no report view
    schemas = {
        r[0]
        for r in out.execute(
            "SELECT schema_name FROM duckdb_schemas() WHERE NOT internal"
        ).fetchall()
    }
    assert not any(x.startswith("stability_") for x in schemas)
    assert stage.is_file()  # the metric database is left as it was


def test_concept_figures_render_from_the_gap_tables(tmp_path, con):
    db = tmp_path / "illusion.duckdb"
    con.execute(f"ATTACH '{db}' AS out")
    con.execute("COPY FROM DATABASE memory TO out")
    con.execute("DETACH out")
    written = make_figures(db, tmp_path / "fig", CONCEPT_FIGURES)
    assert [p.name for p in written] == [f"{n}.png" for n in CONCEPT_FIGURES]
    for p in written:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_report_views_rank_the_tables(con):
    views = {
        r[0]
        for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    }
    assert set(REPORT_VIEWS) <= views
    # without SAE fits the fit table is there, empty
    assert con.execute("SELECT count(*) FROM report_concept_sae").fetchone() == (0,)
    # chi_bench across benchmarks (see test_chi_bench_by_hand): c0 1.8, c3 1.0, c1 0.8, c2 0.4
    best = con.execute(
        "SELECT concept, chi_bench, rank FROM report_best_covered ORDER BY rank"
    ).fetchall()
    assert best == [(0, 1.8, 1), (3, 1.0, 2), (1, 0.8, 3), (2, 0.4, 4)]
    least = con.execute("SELECT concept, rank FROM report_least_covered ORDER BY rank").fetchall()
    assert least == [(2, 1), (1, 2), (3, 3), (0, 4)]
    gaps = con.execute(
        "SELECT concept, chi_model, rank FROM report_dense_gaps ORDER BY rank"
    ).fetchall()
    want = con.execute("""SELECT concept, round(chi_model, 3) FROM chi_model \
WHERE population = 'pool'
                          AND format = 'open' AND dataset = 'all' AND supported \
ORDER BY chi_model, concept""").fetchall()
    assert [g[:2] for g in gaps] == want and [g[2] for g in gaps] == list(range(1, len(want) + 1))
    criteria = con.execute(
        "SELECT fdr_q, ci_level, permutations, tested FROM report_damage_criteria"
    ).fetchall()
    tested = con.execute("""SELECT count(*) FROM concept_damage_tests \
WHERE format = 'open' AND dataset = 'all'
                            AND method = 'w'""").fetchone()[0]
    assert criteria == [(0.1, 0.95, 1000, tested)]


def test_sentence_tolerant_formats_in_the_concept_tables(tmp_path):
    # w's open answer to i1 states the gold in a sentence: strictly wrong, sentence-correct
    pruned = [
        dict(r, correct_sentence=True)
        if (r["item_id"], r["format"], r["decode"]) == ("i1", "open", "greedy")
        else r
        for r in PRUNED
    ]
    con = build(tmp_path, DENSE + pruned, {"en": ["i1", "i2", "i3", "i4"]}, pool=POOL)
    a, t, lab = concept_files(tmp_path)
    load_concept_tables(con, [a], [t], [lab])
    run_concept_sql(con, CONCEPT_SQL, DEFAULT_GAPS)
    q = """SELECT concept, chi_model FROM chi_model WHERE population = 'selected'
           AND method = 'w' AND format = '{}' AND lang = 'en'"""
    # c0: i1 (2; sentence-correct), i2 (1; wrong) -> strict 0, sentence 2/3; c1: i3 wrong, i4
    # right -> 3/4 under both
    assert values(con, q.format("open"))[0] == 0.0
    sent = values(con, q.format("open_sentence"))
    assert sent[0] == pytest.approx(2 / 3) and sent[1] == pytest.approx(0.75)
    d = values(
        con,
        "SELECT concept, drop_open, drop_open_sentence, verbose_rate, mc_only_sentence_rate, "
        "q_open_sentence IS NOT NULL FROM concept_damage WHERE lang = 'en'",
    )
    # c0: verbose share 2/3 (i1), sentence MC-only 1/3 (i2 only); tested like the strict drop
    assert d[0] == pytest.approx((1.0, 1 / 3, 2 / 3, 1 / 3, True))
