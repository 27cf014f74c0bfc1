"""The concept-damage tests (damage.damage_tests, workflow/sql/concepts/30_damage.sql) on a
synthetic benchmark where the truth is known by construction.

Three languages of 40 selected items each (dataset d); the dense model answers every item in
open, candidates and mc; pruned checkpoint 'w' loses open (and candidates) answers by language:
  en: en00-en15 (drop 0.4)    de: de04-de39 (0.9)    es: i % 10 < 3, 12 items (0.3)
and mc answers on en00-en03, de00/10/20/30.
Concepts (a_c(x)):
  0  damaged:        en00-en19, a = 1 + i/20: covers all 16 lost English items -> far above 0.4
  1  German:         every de item, a = 2 -> drop 0.9, the largest raw drop, all of it language
  2  Spanish:        every es item, a = 1
  3  two languages:  every de item (a = 1) and every es item (a = 3)
  4  English, even:  en items with an even number (20), a = 1 -> 8 of 20 lost = the language's 0.4
  5  rare:           en00-en04 (support 5, below min_support)
  6-25  noise:       25 random items of one language each, random a (a seeded family for BH)
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml

from benchmark_illusion.__main__ import main
from benchmark_illusion.concepts.damage import bh_qvalues
from benchmark_illusion.concepts.gap_settings import GapSettings
from benchmark_illusion.concepts.gaps import (
    load_concept_tables,
    load_sae_fits,
    run_concept_sql,
)
from benchmark_illusion.config.validate import ConfigError, validate_config
from benchmark_illusion.metrics.figures.concepts import _concept_damage_figure
from concepts.test_concepts_sql import concept_files
from config.test_config import minimal
from metrics.test_sql import build, row

ROOT = Path(__file__).resolve().parents[2]
CONCEPT_SQL = sorted(str(p) for p in (ROOT / "workflow/sql/concepts").glob("*.sql"))
LANGS = ("en", "de", "es")
N = 40
SETTINGS = GapSettings(min_support=20, permutations=1000, fdr_q=0.1, seed=7)


def ids(lang):
    return [f"{lang}{i:02d}" for i in range(N)]


def lost_open(lang, i, language_only=False):
    if lang == "en":
        return i % 5 < 2 if language_only else i < 16
    if lang == "de":
        return i >= 4
    return i % 10 < 3


def lost_mc(lang, i):
    return (lang == "en" and i < 4) or (lang == "de" and i % 10 == 0)


def activations():
    """(lang, item, concept, a) rows as described in the module docstring."""
    acts = [("en", f"en{i:02d}", 0, 1 + i / 20) for i in range(20)]
    acts += [("de", x, 1, 2.0) for x in ids("de")]
    acts += [("es", x, 2, 1.0) for x in ids("es")]
    acts += [("de", x, 3, 1.0) for x in ids("de")] + [("es", x, 3, 3.0) for x in ids("es")]
    acts += [("en", f"en{i:02d}", 4, 1.0) for i in range(0, N, 2)]
    acts += [("en", f"en{i:02d}", 5, 1.0) for i in range(5)]
    rng = np.random.default_rng(0)
    for c in range(6, 26):
        lang = LANGS[c % 3]
        for i in rng.choice(N, 25, replace=False):
            acts.append((lang, f"{lang}{i:02d}", c, float(rng.uniform(0.5, 2.0))))
    return acts


def write_concepts(tmp_path, acts, n_concepts=26, items=None):
    items = items or {lang: ids(lang) for lang in LANGS}
    return concept_files(tmp_path, acts, items, n_concepts)


def synthetic(tmp_path, settings=SETTINGS, language_only=False):
    dense, pruned = [], []
    for lang in LANGS:
        for i, x in enumerate(ids(lang)):
            dense += [
                row("dense", x, f, True, lang=lang, rank=1) for f in ("open", "candidates", "mc")
            ]
            lost = lost_open(lang, i, language_only)
            pruned += [
                row("w", x, "open", not lost, lang=lang, rank=5 if lost else 1),
                row("w", x, "candidates", not lost, lang=lang),
                row("w", x, "mc", not lost_mc(lang, i), lang=lang),
            ]
    con = build(tmp_path, dense + pruned, {lang: ids(lang) for lang in LANGS}, pool=dense)
    a, t, lab = write_concepts(tmp_path, activations())
    load_concept_tables(con, [a], [t], [lab])
    run_concept_sql(con, CONCEPT_SQL, settings)
    return con


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    return synthetic(tmp_path_factory.mktemp("stats"))


def damage(con, lang="all"):
    return {
        r["concept"]: r
        for r in con.sql(f"SELECT * FROM concept_damage WHERE lang = '{lang}'").pl().to_dicts()
    }


def a32(values):
    """Activations as the parquet stores them (float32), back in float64."""
    return np.asarray(values, dtype=np.float32).astype(float)


def test_the_damaged_concept_is_found_and_the_language_concepts_are_not(con):
    d = damage(con)
    # concept 0: its lost items are en00-en15 of en00-en19, a = 1 + i/20; its language loses 0.4
    a = a32([1 + i / 20 for i in range(20)])
    assert d[0]["drop_open"] == pytest.approx(a[:16].sum() / a.sum())
    assert d[0]["expected_drop_open"] == pytest.approx(0.4)
    assert d[0]["excess_open"] == pytest.approx(a[:16].sum() / a.sum() - 0.4)
    assert d[0]["p_open"] == pytest.approx(1 / 1001)  # no permutation of en's drops comes close
    assert d[0]["q_open"] < 0.1 and d[0]["significant_open"]
    assert damage(con, "en")[0]["significant_open"]
    # the language concepts: their drop is their languages' drop, nothing more
    assert d[1]["drop_open"] == pytest.approx(0.9) and d[2]["drop_open"] == pytest.approx(0.3)
    for c in (1, 2, 3):
        assert d[c]["excess_open"] == pytest.approx(0.0, abs=1e-12)
        # every item of their languages carries them: a permutation within languages changes nothing
        assert d[c]["p_open"] == pytest.approx(1.0)
        assert d[c]["q_open"] >= 0.1 and not d[c]["significant_open"]
    assert d[4]["excess_open"] == pytest.approx(0.0, abs=1e-12) and not d[4]["significant_open"]
    # ranked by the raw drop, German concepts come first ("most damaged concepts" = "most damaged
    # language"): every supported concept above concept 0 is such a one, and none is significant
    above = [r for c, r in d.items() if r["supported"] and r["drop_open"] > d[0]["drop_open"]]
    assert 1 in {r["concept"] for r in above} and not any(r["significant_open"] for r in above)
    # support 5 < min_support: neither tested nor listed, however large its drop
    assert d[5]["drop_open"] == pytest.approx(1.0) and not d[5]["supported"]
    assert d[5]["p_open"] is None and d[5]["q_open"] is None and not d[5]["significant_open"]


def test_across_benchmarks_drop_and_expectation_average_the_benchmarks(con):
    d = damage(con)
    # concept 3: de (a = 1, pruned open right on 4 of 40) and es (a = 3, right on 28 of 40)
    chi = {
        r[0]: r[1:]
        for r in con.execute(
            """SELECT lang, chi_model, n_benchmarks, support FROM chi_model \
WHERE population = 'selected'
           AND method = 'w' AND format = 'open' AND concept = 3"""
        ).fetchall()
    }
    assert chi["de"][0] == pytest.approx(0.1) and chi["es"][0] == pytest.approx(0.7)
    assert chi["all"] == pytest.approx((0.4, 2, 80))  # the mean of 0.1 and 0.7, not the pooled 0.55
    assert d[3]["drop_open"] == pytest.approx(0.6)
    assert d[3]["expected_drop_open"] == pytest.approx((0.9 + 0.3) / 2)
    tests = con.execute("""SELECT n_benchmarks, support, drop, expected_drop \
FROM concept_damage_tests
                           WHERE format = 'open' AND lang = 'all' AND concept = 3""").fetchall()
    assert tests == [pytest.approx((2, 80, 0.6, 0.6))]


def test_chi_model_across_benchmarks_is_the_mean_of_the_benchmarks(con):
    bad = con.execute("""
        WITH per AS (SELECT population, method, sparsity, format, concept, \
avg(chi_model) AS mean_chi,
                            count(*) AS n, sum(support) AS support, avg(accuracy) AS acc
                     FROM chi_model WHERE dataset <> 'all' GROUP BY ALL)
        SELECT count(*) FROM chi_model a \
JOIN per p USING (population, method, sparsity, format, concept)
        WHERE a.dataset = 'all' AND (abs(a.chi_model - p.mean_chi) > 1e-12 OR a.n_benchmarks <> p.n
                                     OR a.support <> p.support \
OR abs(a.accuracy - p.acc) > 1e-12)""").fetchall()[0][0]
    assert bad == 0
    n_all = con.execute("SELECT count(*) FROM chi_model WHERE dataset = 'all'").fetchall()[0][0]
    assert n_all > 0


def test_the_intervals_reuse_the_metric_bootstrap(con):
    # concept 2 sits on every es item with one weight: its drop is es's drop on every resample, so
    # its interval is the rates' bootstrap (rate_intervals: same bootstrap_weights, same
    # percentile rule; `rates` shows Bonett-Price's for a drop)
    rates = {
        r[0]: r[1:]
        for r in con.execute("""SELECT metric, ci_low, ci_high FROM rate_intervals
                    WHERE method = 'w' AND lang = 'es' AND metric = 'drop_open' \
AND population = 'selected'""").fetchall()
    }
    d = damage(con, "es")[2]
    assert (d["drop_open_ci_low"], d["drop_open_ci_high"]) == pytest.approx(rates["drop_open"])
    assert d["drop_open_ci_low"] < d["drop_open"] < d["drop_open_ci_high"]
    # ... and its excess over its language is 0 on every resample
    assert (d["excess_open_ci_low"], d["excess_open_ci_high"]) == pytest.approx(
        (0.0, 0.0), abs=1e-12
    )
    # the damaged concept's excess interval excludes 0
    assert damage(con)[0]["excess_open_ci_low"] > 0
    n_boot = con.execute("SELECT min(n_boot), max(n_boot) FROM concept_damage_tests").fetchall()[0]
    assert n_boot == (1000, 1000)


def test_q_values_are_benjamini_hochberg_over_the_supported_concepts(con):
    groups = (
        con.sql("""SELECT method, format, lang, list(p_value ORDER BY concept) AS p,
                               list(q_value ORDER BY concept) AS q, count(*) AS m
                        FROM concept_damage_tests WHERE supported GROUP BY ALL""")
        .pl()
        .to_dicts()
    )
    assert {(g["format"], g["lang"]) for g in groups} >= {
        ("open", "all"),
        ("mc", "all"),
        ("open", "en"),
    }
    for g in groups:
        p, m = np.array(g["p"]), g["m"]
        # the definition: q_i = min over p_j >= p_i of m p_j / #{p <= p_j}, at most 1
        rank = np.array([(p <= x).sum() for x in p])
        expected = [min(1.0, min(m * p[j] / rank[j] for j in range(m) if p[j] >= x)) for x in p]
        assert g["q"] == pytest.approx(expected), g
    assert (
        con.execute("SELECT count(*) FROM concept_damage_tests WHERE NOT supported").fetchall()[0][
            0
        ]
        == 0
    )


def test_bh_by_hand():
    # p = .01 .04 .03 .2 (m = 4): sorted .01 .03 .04 .2 -> 4p/rank = .04 .06 .0533 .2 -> running
    # minimum from the top: .04 .0533 .0533 .2
    assert bh_qvalues([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.2])
    # ties share a q-value; nothing exceeds 1
    assert bh_qvalues([0.5, 0.5, 0.9]) == pytest.approx([0.75, 0.75, 0.9])
    assert bh_qvalues([0.9, 0.95]).max() <= 1.0
    assert len(bh_qvalues([])) == 0


def test_p_values_are_seeded_and_counted_in_permutations(tmp_path, con):
    cols = "method, format, lang, concept, p_value, q_value, ci_low, ci_high"
    first = con.sql(f"SELECT {cols} FROM concept_damage_tests ORDER BY ALL").pl()
    (tmp_path / "again").mkdir()
    again = (
        synthetic(tmp_path / "again")
        .sql(f"SELECT {cols} FROM concept_damage_tests ORDER BY ALL")
        .pl()
    )
    assert first.equals(again)
    (tmp_path / "other").mkdir()
    other = synthetic(tmp_path / "other", GapSettings(min_support=20, permutations=1000, seed=8))
    other = other.sql(f"SELECT {cols} FROM concept_damage_tests ORDER BY ALL").pl()
    assert not first["p_value"].equals(other["p_value"])
    # the permutations come from the settings: every p is k / (permutations + 1)
    k = first["p_value"].to_numpy() * 1001
    assert np.allclose(k, np.round(k)) and con.execute(
        "SELECT DISTINCT n_perm FROM concept_damage_tests"
    ).fetchall() == [(1000,)]
    s = con.execute(
        "SELECT permutations, fdr_q, ci_level, min_support, seed FROM concept_damage_settings"
    ).fetchall()
    assert s == [(1000, 0.1, 0.95, 20, 7)]


def test_permutations_stay_within_a_language(tmp_path):
    """en: 4 items, 2 lost, concept 0 on exactly the 2 lost ones; es: 4 items, all lost. Within
    en, a permutation puts both losses on the concept with probability 1/C(4,2) = 1/6; permuting
    across languages (6 losses in 8 items) would give C(6,2)/C(8,2) = 15/28."""
    items = {"en": ["e1", "e2", "e3", "e4"], "es": ["s1", "s2", "s3", "s4"]}
    dense, pruned = [], []
    for lang, xs in items.items():
        for x in xs:
            dense += [
                row("dense", x, f, True, lang=lang, rank=1) for f in ("open", "candidates", "mc")
            ]
            lost = lang == "es" or x in ("e1", "e2")
            pruned += [
                row("w", x, "open", not lost, lang=lang, rank=1),
                row("w", x, "candidates", True, lang=lang),
                row("w", x, "mc", True, lang=lang),
            ]
    con = build(tmp_path, dense + pruned, items, pool=dense)
    acts = [("en", "e1", 0, 1.0), ("en", "e2", 0, 1.0), ("es", "s1", 1, 1.0)]
    a, t, lab = write_concepts(tmp_path, acts, n_concepts=2, items=items)
    load_concept_tables(con, [a], [t], [lab])
    run_concept_sql(con, CONCEPT_SQL, GapSettings(min_support=2, permutations=20000, seed=1))
    p = dict(
        con.execute("""SELECT lang, p_value FROM concept_damage_tests WHERE concept = 0
                            AND format = 'open'""").fetchall()
    )
    assert p["en"] == pytest.approx(1 / 6, abs=0.015) and p["all"] == pytest.approx(p["en"])
    # mc and candidates lost nothing: every permutation ties the observed 0, p = 1
    mc = con.execute(
        "SELECT max(p_value), min(p_value) FROM concept_damage_tests WHERE format = 'mc'"
    ).fetchall()
    assert mc == [(1.0, 1.0)]


def test_pure_language_damage_has_no_significant_concept(tmp_path):
    con = synthetic(tmp_path, language_only=True)
    structured = con.execute(
        "SELECT count(*) FROM concept_damage WHERE concept < 6 AND significant_open"
    ).fetchall()
    assert structured == [(0,)]
    # en's losses (i % 5 < 2) fall on concept 0 in proportion: no excess
    assert damage(con)[0]["excess_open"] == pytest.approx(0.0, abs=0.05)


def test_dense_gaps_on_the_selected_items_are_left_out(con):
    kinds = dict(
        con.execute(
            """SELECT population || '/' || method, count(*) FROM model_gaps GROUP BY 1"""
        ).fetchall()
    )
    assert "selected/dense" not in kinds and kinds.get("selected/w", 0) > 0


def test_gap_settings_are_checked():
    GapSettings(seed=3, ci_level=0.9, permutations=500, fdr_q=0.05).check()
    for bad in ({"permutations": 0}, {"fdr_q": 0.0}, {"fdr_q": 1.5}, {"ci_level": 1.0}):
        with pytest.raises(ValueError):
            GapSettings(**bad).check()


def test_config_defaults_and_limits():
    gaps = validate_config(minimal())["concepts"]["gaps"]
    assert (gaps["min_support"], gaps["permutations"], gaps["fdr_q"]) == (20, 1000, 0.1)
    shipped = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["concepts"]["gaps"]
    assert shipped["min_support"] >= 20
    for bad in ({"permutations": 0}, {"fdr_q": 0}, {"fdr_q": 1.2}):
        cfg = minimal()
        cfg["concepts"] = {"gaps": bad}
        with pytest.raises(ConfigError, match="concepts.gaps." + next(iter(bad))):
            validate_config(cfg)


def _copy(con, tmp_path) -> Path:
    """The in-memory database as a file, with an SAE fit row (the CLI prints it first)."""
    fit = tmp_path / "fit.json"
    fit.write_text(
        json.dumps(
            {
                "source": "train",
                "hook_name": "blocks.1.hook_resid_post",
                "d_sae": 26,
                "k": 2,
                "fve": 0.9,
                "l0": 2.0,
                "dead_fraction": 0.0,
                "pca_fve_same_k": 0.5,
                "heldout_positions": 10,
                "norm_threshold": 100.0,
                "corpus_tokens": 100,
                "seconds": 1,
            }
        )
    )
    load_sae_fits(con, {"m": str(fit)})
    db = tmp_path / "illusion.duckdb"
    con.execute(f"ATTACH '{db}' AS out")
    con.execute("COPY FROM DATABASE memory TO out")
    con.execute("DETACH out")
    return db


def test_cli_lists_only_significant_concepts(tmp_path, con, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = _copy(con, tmp_path)
    assert main(["--db", str(db), "concepts", "-n", "3"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("Significantly damaged concepts") :]
    assert (
        "c0" in section
        and "c1 " not in section
        and "no concept is significantly damaged" not in section
    )

    (tmp_path / "null").mkdir()
    null = synthetic(tmp_path / "null", language_only=True)
    assert null.execute("SELECT count(*) FROM concept_damage WHERE significant_open").fetchall()[
        0
    ] == (0,)
    db = _copy(null, tmp_path / "null")
    assert main(["--db", str(db), "concepts"]) == 0
    out = capsys.readouterr().out
    assert (
        "no concept is significantly damaged" in out[out.index("Significantly damaged concepts") :]
    )


def test_figure_shows_only_significant_concepts(tmp_path, con):
    fig = _concept_damage_figure(con)
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert any(t.startswith("#0 c0") for t in labels) and not any(
        t.startswith("#1 ") for t in labels
    )
    (tmp_path / "null").mkdir()
    null = synthetic(tmp_path / "null", language_only=True)
    assert null.execute("SELECT count(*) FROM concept_damage WHERE significant_open").fetchall()[
        0
    ] == (0,)
    fig = _concept_damage_figure(null)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [fig._suptitle.get_text()]
    assert any("no concept is significantly damaged" in t for t in texts)


def test_report_views_list_the_significant_concepts(con):
    got = con.execute("""SELECT method, structure, sparsity, concept, excess_open, q_open, rank, \
method_peak
                         FROM report_damaged_concepts ORDER BY rank""").fetchall()
    want = con.execute("""SELECT method, structure, sparsity, concept, excess_open, q_open \
FROM concept_damage
                          WHERE dataset = 'all' AND significant_open \
ORDER BY excess_open DESC, q_open, concept""").fetchall()
    # one pruned checkpoint: every concept is at its method's peak
    assert got == [(*w, k, True) for k, w in enumerate(want, 1)] and 0 in {g[3] for g in got}
    printed = con.execute(
        "SELECT concept, drop_open_ci, q, rank FROM report_concept_damage ORDER BY rank"
    ).fetchall()
    d = damage(con)
    assert [p[0] for p in printed] == [w[3] for w in want]
    c0 = next(p for p in printed if p[0] == 0)
    r = d[0]
    assert (
        c0[1] == f"{r['drop_open']:.2f} [{r['drop_open_ci_low']:.2f}, {r['drop_open_ci_high']:.2f}]"
    )
    assert c0[2] == f"{r['q_open']:.2g}"


def test_cli_and_figure_read_the_report_views(tmp_path, con, capsys, monkeypatch):
    """Change the views, and the command and the figure change with them."""
    monkeypatch.chdir(tmp_path)
    db = _copy(con, tmp_path)
    out = duckdb.connect(str(db))
    for view in ("report_best_covered", "report_least_covered", "report_dense_gaps"):
        out.execute(
            f"CREATE OR REPLACE VIEW {view} AS "
            f"SELECT 'm' AS model, 'from {view}' AS marker, 1 AS rank"
        )
    # concept 1 (German) is not significantly damaged: only the changed view lists it
    out.execute("""CREATE OR REPLACE VIEW report_damaged_concepts AS
                   SELECT * REPLACE ('from the view' AS label), 1 AS rank, true AS method_peak \
FROM concept_damage
                   WHERE dataset = 'all' AND concept = 1""")
    out.execute(
        "CREATE OR REPLACE VIEW report_damage_criteria AS SELECT 0.5 AS fdr_q, 0.8 AS ci_level, "
        "7 AS permutations, 3 AS tested"
    )
    fig = _concept_damage_figure(out)
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert labels and all(t.startswith("#1 from the view") for t in labels)
    assert "BH q < 0.5" in fig._suptitle.get_text() and "80% interval" in fig._suptitle.get_text()
    out.close()
    assert main(["--db", str(db), "concepts"]) == 0
    printed = capsys.readouterr().out
    for view in ("report_best_covered", "report_least_covered", "report_dense_gaps"):
        assert f"from {view}" in printed
    section = printed[printed.index("Significantly damaged concepts") :]
    assert "BH q < 0.5" in section and "from the view" in section
