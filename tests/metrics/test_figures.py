"""Figures from hand-built metric tables: every figure is written, also for grids the smoke run
does not cover (N:M checkpoints, two models, dense only), and every series a figure draws is the
one its table holds (read back from the matplotlib figure, compared with SQL on the table)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure

from benchmark_illusion.concepts.gap_settings import GapSettings
from benchmark_illusion.evaluation.schema import LOG_SCHEMA
from benchmark_illusion.metrics.aggregate import MetricSettings, create_views, run_metric_sql
from benchmark_illusion.metrics.figures.accuracy import MC_ONLY_STATUSES
from benchmark_illusion.metrics.figures.common import DECODES, FORMATS
from benchmark_illusion.metrics.figures.names import CONCEPT_FIGURES
from benchmark_illusion.metrics.figures.names import METRIC_FIGURES as FIGURES
from benchmark_illusion.metrics.steps import DRAW, make_figures

ROOT = Path(__file__).resolve().parents[2]
SQL = sorted(str(p) for p in (ROOT / "workflow/sql").glob("*.sql"))


def rows_for(
    model, method, structure, sparsity, lang, item, open_ok, mc_ok, rank, decode_all=False
):
    base = dict(
        model=model,
        method=method,
        structure=structure,
        sparsity=sparsity,
        dataset="d",
        lang=lang,
        item_id=item,
        sample=0,
        seed=0,
    )
    out = [
        dict(base, format="open", decode="greedy", correct=open_ok, gold_rank=rank),
        dict(
            base,
            format="mc",
            decode="loglik",
            correct=mc_ok,
            correct_norm=mc_ok,
            pred_option=0 if mc_ok else 1,
            gold_option=0,
        ),
        dict(
            base,
            format="candidates",
            decode="greedy",
            correct=open_ok,
            pred_option=0 if open_ok else 2,
            gold_option=0,
        ),
    ]
    if decode_all or (
        mc_ok and not open_ok
    ):  # recovery decodes on MC-only items (scope all: every item)
        out += [
            dict(
                base,
                format="open",
                decode="beam",
                sample=k,
                correct=k == 1 or open_ok,
                decoy_correct=k == 0,
                # each option judged as the gold: beam 0 produces the distractor 1
                option_correct=[k == 1 or open_ok, k == 0, False, False],
                gold_option=0,
            )
            for k in range(2)
        ]
        out.append(
            dict(
                base,
                format="oneshot",
                decode="greedy",
                correct=rank < 5,
                decoy_correct=False,
                option_correct=[rank < 5, False, False, False],
                gold_option=0,
            )
        )
    # short answers: the sentence-tolerant verdict agrees with the strict one
    return [r if r["format"] == "mc" else dict(r, correct_sentence=r["correct"]) for r in out]


def database(tmp_path: Path, checkpoints, models=("m",), decode_all=False) -> Path:
    rows, selected = [], {}
    for model in models:
        for lang in ("en", "es"):
            ids = [f"{lang}{i}" for i in range(6)]
            selected[(model, lang)] = ids
            for i, item in enumerate(ids):
                rows += rows_for(model, "dense", "none", 0.0, lang, item, True, True, 1, decode_all)
                for method, structure, sparsity, *loss in checkpoints:
                    # items lost: by sparsity, or as given (a quantized checkpoint has sparsity 0)
                    lost = i < round((loss[0] if loss else sparsity) * 8)
                    rows += rows_for(
                        model,
                        method,
                        structure,
                        sparsity,
                        lang,
                        item,
                        not lost,
                        True,
                        1 + 3 * i if lost else 1,
                        decode_all,
                    )
    pl.DataFrame(rows, schema=LOG_SCHEMA).write_parquet(tmp_path / "g.parquet")
    sel = []
    for (model, lang), ids in selected.items():
        path = tmp_path / "selected" / model / "d" / f"{lang}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(
            {
                "item_id": ids,
                "dataset": "d",
                "lang": lang,
                "options": [["a", "b", "c", "d"]] * len(ids),
            },
            schema_overrides={"options": pl.List(pl.String)},
        ).write_parquet(path)
        sel.append(str(path))
    db = tmp_path / "illusion.duckdb"
    con = duckdb.connect(str(db))
    create_views(con, [str(tmp_path / "g.parquet")], sel, [str(tmp_path / "g.parquet")])
    run_metric_sql(con, SQL, MetricSettings(bootstrap_replicates=100))
    con.close()
    return db


def assert_pngs(paths, out: Path):
    assert [p.name for p in paths] == [f"{n}.png" for n in FIGURES]
    for p in paths:
        data = (out / p.name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, p


def test_figures_with_nm_checkpoints_and_two_models(tmp_path):
    grid = [
        ("wanda", "unstructured", 0.25),
        ("wanda", "unstructured", 0.5),
        ("wanda", "2:4", 0.5),
        ("sparsegpt", "unstructured", 0.5),
    ]
    db = database(tmp_path, grid, models=("a", "b"))
    out = tmp_path / "figures"
    assert_pngs(make_figures(db, out), out)
    assert not list(out.glob("*.tmp*")) and not list(out.glob(".*"))


def test_figures_for_a_dense_only_run(tmp_path):
    """No pruned checkpoint: the figures still exist and say why they are empty."""
    db = database(tmp_path, [])
    out = tmp_path / "figures"
    assert_pngs(make_figures(db, out), out)


def test_figures_with_every_item_decoded(tmp_path):
    """recovery.scope all: the oracle rows are complete (the figure draws them), false recovery
    too."""
    db = database(
        tmp_path, [("wanda", "unstructured", 0.25), ("wanda", "unstructured", 0.5)], decode_all=True
    )
    con = duckdb.connect(str(db), read_only=True)
    complete = con.execute(
        "SELECT count(*), bool_and(complete) FROM oracle WHERE decode = 'oracle'"
    ).fetchone()
    false_rec = con.execute(
        "SELECT max(false_recovery_rate) FROM recovery WHERE decode = 'beam_any'"
    ).fetchall()[0][0]
    con.close()
    assert complete[0] > 0 and complete[1]
    assert false_rec == 1.0  # beam 0 hits the decoy on every item
    out = tmp_path / "figures"
    assert_pngs(make_figures(db, out), out)


def test_quantized_checkpoints_are_drawn_by_size_and_kept_out_of_the_sparsity_figures(tmp_path):
    from benchmark_illusion.metrics.aggregate import connect
    from benchmark_illusion.metrics.figures.common import pruning_methods

    grid = [
        ("wanda", "unstructured", 0.5),
        ("wanda", "2:4", 0.5),
        ("rtn", "int4-g128", 0.0, 0.25),
        ("gptq", "int4-g128", 0.0, 0.125),
        ("gptq", "int3-g128", 0.0, 0.5),
    ]
    db = database(tmp_path, grid)
    con = connect(db)
    acc = con.sql("SELECT * FROM accuracy").pl()
    size = con.sql("SELECT method, structure, weight_bits FROM checkpoints ORDER BY 1, 2").pl()
    con.close()
    assert pruning_methods(acc) == ["wanda"]  # no rtn/gptq panel or line at 'sparsity 0'
    assert size.filter(pl.col("method") == "gptq")["weight_bits"].to_list() == [
        3 + 19 / 128,
        4 + 20 / 128,
    ]
    out = tmp_path / "figures"
    assert_pngs(make_figures(db, out), out)


# --------------------------------------------------------------------------------------------
# What the figures plot: every series read back from the matplotlib figure and compared with the
# table the figure draws from, on logs where the formats, languages, decodes and checkpoints all
# differ (a figure that plots one series in place of another cannot pass by coincidence).

ITEMS = 8  # per language
# (model, method, structure, sparsity) -> items lost in open, candidates and mc (language en;
# es loses one more item in open). Open loses items 0.., candidates 0.., mc the last ones. At
# every checkpoint the three accuracies differ, and their order is not the same everywhere.
LOST = {
    ("a", "dense", "none", 0.0): (1, 0, 2),
    ("a", "wanda", "unstructured", 0.25): (3, 2, 1),
    ("a", "wanda", "unstructured", 0.5): (5, 3, 2),
    ("a", "wanda", "2:4", 0.5): (5, 4, 2),
    ("a", "sparsegpt", "unstructured", 0.5): (4, 1, 2),
    ("a", "rtn", "int4-g128", 0.0): (2, 1, 0),
    ("a", "gptq", "int4-g128", 0.0): (2, 0, 1),
    ("a", "gptq", "int3-g128", 0.0): (4, 2, 1),
    ("a", "noise0-wanda", "unstructured", 0.5): (2, 1, 1),  # wanda 0.5's perturbed twin
    ("b", "dense", "none", 0.0): (0, 2, 1),
    ("b", "wanda", "unstructured", 0.25): (2, 3, 0),
    ("b", "wanda", "unstructured", 0.5): (6, 2, 1),
}
# recovery decodes run on every item (recovery.scope all: the oracle is complete) except the
# first item of these checkpoints (an MC-only item with no decode: 'untested')
UNDECODED_FIRST = {("a", "sparsegpt", "unstructured", 0.5)}


def varied_rows(key, lang, i):
    """The log rows of item i of one checkpoint (see LOST)."""
    model, method, structure, sparsity = key
    open_lost, cand_lost, mc_lost = LOST[key]
    open_ok = i >= open_lost + (lang == "es")
    cand_ok = i >= cand_lost
    mc_ok = i < ITEMS - mc_lost
    verbose = not open_ok and i == 1  # the gold stated in a sentence: the strict judge says no
    if method == "dense":
        rank = 1 + i % 3
    else:
        rank = 1 if open_ok else 2 + 3 * i
    base = dict(
        model=model,
        method=method,
        structure=structure,
        sparsity=sparsity,
        dataset="d",
        lang=lang,
        item_id=f"{lang}{i}",
        sample=0,
        seed=0,
        gold_option=0,
    )
    out = [
        dict(
            base,
            format="open",
            decode="greedy",
            correct=open_ok,
            correct_sentence=open_ok or verbose,
            gold_rank=rank,
            gold_token_partial=False,
        ),
        dict(
            base,
            format="candidates",
            decode="greedy",
            correct=cand_ok,
            correct_sentence=cand_ok,
            # a wrong answer names option C, or no single option
            pred_option=0 if cand_ok else (2 if i % 2 else None),
        ),
        dict(
            base,
            format="mc",
            decode="loglik",
            correct=mc_ok,
            correct_norm=mc_ok,
            pred_option=0 if mc_ok else 1 + i % 3,
        ),
    ]
    if i == 0 and key in UNDECODED_FIRST:
        return out
    # beams: the top one recovers item 5 and produces the distractor B on items 1 and 5; the
    # second one recovers items 1 and 5
    beams = [(open_ok or i == 5, i % 4 == 1), (open_ok or i % 4 == 1, False)]
    out += [
        dict(
            base,
            format="open",
            decode="beam",
            sample=k,
            correct=ok,
            correct_sentence=ok,
            decoy_correct=decoy,
            option_correct=[ok, decoy, False, False],
        )
        for k, (ok, decoy) in enumerate(beams)
    ]
    # three samples: two right on item 2 (pass and majority), one on items 4 and 6 (pass only)
    right = {2: 2, 4: 1, 6: 1}.get(i, 0)
    out += [
        dict(
            base,
            format="open",
            decode="sample",
            sample=k,
            answer_norm="gold" if ok else "x",
            correct=ok,
            correct_sentence=ok,
            decoy_correct=False,
            option_correct=[ok, False, False, False],
        )
        for k, ok in enumerate([open_ok or k < right for k in range(3)])
    ]
    oneshot = open_ok or rank < 5
    out.append(
        dict(
            base,
            format="oneshot",
            decode="greedy",
            correct=oneshot,
            correct_sentence=oneshot,
            decoy_correct=False,
            option_correct=[oneshot, False, False, False],
        )
    )
    return out


def varied_database(tmp: Path) -> Path:
    """The metric database of the LOST logs (two models, languages en and es)."""
    rows = [
        r
        for key in LOST
        for lang in ("en", "es")
        for i in range(ITEMS)
        for r in varied_rows(key, lang, i)
    ]
    pl.DataFrame(rows, schema=LOG_SCHEMA).write_parquet(tmp / "g.parquet")
    sel = []
    for model in sorted({k[0] for k in LOST}):
        for lang in ("en", "es"):
            path = tmp / "selected" / model / "d" / f"{lang}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pl.DataFrame(
                {
                    "item_id": [f"{lang}{i}" for i in range(ITEMS)],
                    "dataset": "d",
                    "lang": lang,
                    "options": [["a", "b", "c", "d"]] * ITEMS,
                },
                schema_overrides={"options": pl.List(pl.String)},
            ).write_parquet(path)
            sel.append(str(path))
    db = tmp / "illusion.duckdb"
    con = duckdb.connect(str(db))
    create_views(con, [str(tmp / "g.parquet")], sel, [str(tmp / "g.parquet")])
    run_metric_sql(con, SQL, MetricSettings(bootstrap_replicates=100))
    con.close()
    return db


@pytest.fixture(scope="module")
def varied(tmp_path_factory):
    """A read-only connection to varied_database."""
    con = duckdb.connect(str(varied_database(tmp_path_factory.mktemp("varied"))), read_only=True)
    yield con
    con.close()


@pytest.fixture
def draw(monkeypatch, tmp_path):
    """draw(con, name): call figure `name` on con and return the matplotlib Figure it saves.
    Figure.savefig is recorded instead of rendered (the PNGs are the tests above)."""
    saved = []

    def savefig(fig, fname, *args, **kwargs):
        saved.append(fig)
        Path(fname).write_bytes(b"")

    monkeypatch.setattr(Figure, "savefig", savefig)

    def run(con, name):
        DRAW[name](con, tmp_path / f"{name}.png")
        assert len(saved) == 1, name
        return saved.pop()

    return run


def panels(fig) -> dict:
    """The visible panels of a figure by title."""
    out = {}
    for ax in fig.axes:
        if ax.get_visible() and ax.get_title():
            assert ax.get_title() not in out, ax.get_title()
            out[ax.get_title()] = ax
    return out


def errorbars(ax) -> dict:
    """label -> [(x, y, bar low, bar high)] of every errorbar series of a panel."""
    out = {}
    for c in ax.containers:
        if not isinstance(c, ErrorbarContainer):
            continue
        line, _caps, (bars,) = c.lines
        segments = bars.get_segments()
        assert len(segments) == len(line.get_xdata())
        label = c.get_label()
        assert label not in out, label
        out[label] = [
            (float(x), float(y), float(seg[:, 1].min()), float(seg[:, 1].max()))
            for x, y, seg in zip(line.get_xdata(), line.get_ydata(), segments, strict=True)
        ]
    return out


def lines(ax) -> dict:
    """label -> [(x, y)] of the plain lines of a panel (plot and step; no errorbar part)."""
    parts = set()
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            parts.add(c.lines[0])
            parts.update(c.lines[1])
    out = {}
    for line in ax.get_lines():
        if line in parts or line.get_label().startswith("_"):
            continue
        assert line.get_label() not in out, line.get_label()
        out[line.get_label()] = [
            (float(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)
        ]
    return out


def interval_points(rows) -> list:
    """(x, value, ci_low, ci_high) rows as errorbars() reads them back: the bar spans the
    interval (every interval of these tables holds its value, so no bar is clipped)."""
    return [(x, y, lo, hi) for x, y, lo, hi in rows]


def approx(points):
    return [pytest.approx(p, abs=1e-12) for p in points]


def assert_series(got: dict, expected: dict, where: str) -> None:
    assert sorted(got) == sorted(expected), where
    for label, points in expected.items():
        assert got[label] == approx(points), f"{where}: {label}"


MODELS = sorted({k[0] for k in LOST})
PRUNING = {  # model -> pruning methods (the sparsity figures' panels)
    m: sorted({k[1] for k in LOST if k[0] == m and k[1] in ("wanda", "sparsegpt")}) for m in MODELS
}


def structures(model, method) -> list:
    return sorted({k[2] for k in LOST if k[:2] == (model, method)})


def nm(model, method) -> list:
    return [s for s in structures(model, method) if s != "unstructured"]


def line_rows(con, table, cols, model, method, structure, with_dense, where="", params=()):
    """(sparsity, *cols) of `table` for one method's checkpoints of one structure, and the dense
    model's rows if with_dense, by sparsity; `where` (with `params`) narrows the rows."""
    return con.execute(
        f"SELECT sparsity, {cols} FROM {table} WHERE model = ? "
        f"AND ((method = ? AND structure = ?) OR (method = 'dense' AND ?)) {where} "
        "ORDER BY sparsity",
        [model, method, structure, with_dense, *params],
    ).fetchall()


def test_the_varied_logs_separate_every_series(varied):
    """The fixture of the tests below: the three formats differ at every checkpoint that a
    figure draws, and so do the languages' MC-only rates where items are lost."""
    acc = varied.execute(
        "SELECT model, method, structure, sparsity, count(DISTINCT accuracy) FROM accuracy "
        "WHERE dataset = 'all' AND format IN ('open', 'candidates', 'mc') "
        "AND method NOT LIKE 'noise%' GROUP BY ALL"
    ).fetchall()
    assert len(acc) == len(LOST) - 1 and all(r[4] == 3 for r in acc), acc
    langs = varied.execute(
        "SELECT model, method, structure, sparsity, count(DISTINCT mc_only_rate) FROM mc_only "
        "WHERE method NOT IN ('dense') GROUP BY ALL"
    ).fetchall()
    assert all(r[4] == 3 for r in langs), langs  # en, es, pooled


def test_accuracy_vs_sparsity_plots_each_format_from_the_accuracy_table(varied, draw):
    fig = draw(varied, "accuracy_vs_sparsity")
    got = panels(fig)
    expected_titles = {f"{m}: {t}" for m in MODELS for t in FORMATS.values()}
    assert set(got) == expected_titles
    for model in MODELS:
        for fmt, title in FORMATS.items():
            ax = got[f"{model}: {title}"]
            expected = {}
            for method in PRUNING[model]:
                for s in structures(model, method):
                    rows = line_rows(
                        varied,
                        "accuracy",
                        "accuracy, ci_low, ci_high",
                        model,
                        method,
                        s,
                        s == "unstructured",  # the N:M checkpoints are points of their own
                        "AND dataset = 'all' AND format = ?",
                        [fmt],
                    )
                    label = method if s == "unstructured" else f"{method} {s}"
                    expected[label] = interval_points(rows)
            assert_series(errorbars(ax), expected, ax.get_title())
            n = varied.execute(
                "SELECT n_items FROM accuracy WHERE dataset = 'all' AND model = ? "
                "AND method = 'dense' AND format = ?",
                [model, fmt],
            ).fetchall()[0][0]
            assert ax.get_legend().get_title().get_text() == f"n = {n} items"


def method_titles(model_methods) -> set:
    return {f"{model}: {method}" for model, method in model_methods}


PANELS = method_titles((m, x) for m in MODELS for x in PRUNING[m])


def test_mc_only_by_language_plots_each_language_from_the_mc_only_table(varied, draw):
    got = panels(draw(varied, "mc_only_by_language"))
    assert set(got) == PANELS
    for model in MODELS:
        for method in PRUNING[model]:
            ax = got[f"{model}: {method}"]
            by_lang = {
                lang: line_rows(
                    varied,
                    "mc_only",
                    "mc_only_rate, mc_only_ci_low, mc_only_ci_high, n_items",
                    model,
                    method,
                    "unstructured",
                    True,
                    "AND lang = ?",
                    [lang],
                )
                for lang in ("en", "es", "all")
            }
            n = {lang: max(r[-1] for r in rows) for lang, rows in by_lang.items()}
            expected_lines = {
                f"d/{lang} (n={n[lang]})": [r[:2] for r in by_lang[lang]] for lang in ("en", "es")
            }
            assert_series(lines(ax), expected_lines, ax.get_title())
            pooled = interval_points([r[:4] for r in by_lang["all"]])
            expected = {f"all pooled (n={n['all']})": pooled}
            floor = line_rows(
                varied,
                "mc_only",
                "perturbation_floor, perturbation_floor_ci_low, perturbation_floor_ci_high",
                model,
                method,
                "unstructured",
                False,
                "AND lang = 'all' AND perturbation_floor IS NOT NULL",
            )
            if floor:
                label = "perturbation floor, pooled (noise of the same size)"
                expected[label] = interval_points(floor)
            for s in nm(model, method):
                rows = line_rows(
                    varied,
                    "mc_only",
                    "mc_only_rate, mc_only_ci_low, mc_only_ci_high",
                    model,
                    method,
                    s,
                    False,
                    "AND lang = 'all'",
                )
                expected[f"all pooled, {s}"] = interval_points(rows)
            assert_series(errorbars(ax), expected, ax.get_title())
    # the perturbed twin is drawn as wanda's floor
    assert any("perturbation floor" in label for label in errorbars(got["a: wanda"]))


def test_mc_only_split_stacks_each_status_from_the_mc_only_table(varied, draw):
    fig = draw(varied, "mc_only_split")
    got = panels(fig)
    assert set(got) == PANELS
    for model in MODELS:
        for method in PRUNING[model]:
            ax = got[f"{model}: {method}"]
            rows = varied.execute(
                "SELECT structure, sparsity, mc_only_rate, mc_only_verbose_rate, "
                "mc_only_demoted_rate, mc_only_erased_rate, mc_only_untested_rate, "
                "mc_only_sentence_rate, mc_only_sentence_ci_low, mc_only_sentence_ci_high "
                "FROM mc_only WHERE lang = 'all' AND model = ? AND method = ? "
                "ORDER BY structure, sparsity",
                [model, method],
            ).fetchall()
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            assert ticks == [
                f"{sp:g}" if st == "unstructured" else f"{sp:g} {st}" for st, sp, *_ in rows
            ]
            bars = {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}
            assert list(bars) == [label for label, _ in MC_ONLY_STATUSES.values()]
            top = [0.0] * len(rows)
            for k, container in enumerate(bars.values()):
                heights = [p.get_height() for p in container.patches]
                assert heights == approx([r[3 + k] or 0.0 for r in rows]), container.get_label()
                assert [p.get_y() for p in container.patches] == approx(top)
                assert [p.get_x() + p.get_width() / 2 for p in container.patches] == approx(
                    range(len(rows))
                )
                top = [t + h for t, h in zip(top, heights, strict=True)]
            assert top == approx([r[2] for r in rows])  # the stack is the strict MC-only rate
            sentence = interval_points(
                [(x, *r[7:]) for x, r in enumerate(rows) if r[7] is not None]
            )
            assert_series(
                errorbars(ax),
                {"sentence-tolerant MC-only rate (95% CI)": sentence},
                ax.get_title(),
            )


def test_gold_rank_cdf_plots_each_checkpoint_from_the_gold_rank_cdf_table(varied, draw):
    got = panels(draw(varied, "gold_rank_cdf"))
    assert set(got) == PANELS
    for model in MODELS:
        for method in PRUNING[model]:
            ax = got[f"{model}: {method}"]
            rows = varied.execute(
                "SELECT structure, sparsity, series, n_items, gold_rank, cdf FROM gold_rank_cdf "
                "WHERE dataset = 'all' AND model = ? AND method = ? "
                "ORDER BY structure, sparsity, series, gold_rank",
                [model, method],
            ).fetchall()
            expected = {}
            for st, sp, series, n, rank, cdf in rows:
                name = f"{sp:g}" if st == "unstructured" else f"{sp:g} {st}"
                label = (
                    f"{name} pruned (n={n})" if series == "pruned" else f"{name} dense, same items"
                )
                expected.setdefault(label, []).append((rank, cdf))
            # every checkpoint of the method has MC-only items: a pruned and a dense line each
            assert len(expected) == 2 * sum(k[:2] == (model, method) for k in LOST)
            drawn = lines(ax)
            assert sorted(drawn) == sorted(expected), ax.get_title()
            for label, points in expected.items():
                # a CDF that does not reach rank 1 starts from (1, 0)
                start = [] if points[0][0] == 1 else [(1.0, 0.0)]
                assert drawn[label] == approx(start + points), f"{ax.get_title()}: {label}"
            for line in ax.get_lines():
                assert line.get_drawstyle() == "steps-post"


def test_recovery_by_decode_plots_each_decode_from_the_recovery_table(varied, draw):
    got = panels(draw(varied, "recovery_by_decode"))
    assert set(got) == PANELS
    for model in MODELS:
        for method in PRUNING[model]:
            ax = got[f"{model}: {method}"]
            rows = varied.execute(
                "SELECT decode, sparsity, rate, ci_low, ci_high, false_recovery_rate, "
                "false_ci_low, false_ci_high FROM recovery "
                "WHERE dataset = 'all' AND model = ? AND method = ? AND structure = 'unstructured' "
                "ORDER BY sparsity",
                [model, method],
            ).fetchall()
            expected = {}
            for decode, sp, rate, lo, hi, f, flo, fhi in rows:
                expected.setdefault(DECODES[decode], []).append((sp, rate, lo, hi))
                if decode == "oracle" and f is not None:
                    label = "any decode, judged against a distractor (false recovery)"
                    expected.setdefault(label, []).append((sp, f, flo, fhi))
            assert len(expected) == len(DECODES) + 1
            drawn = errorbars(ax)
            assert sorted(drawn) == sorted(expected), ax.get_title()
            for label, points in expected.items():
                # the decodes stand a little apart on the x axis, each near its own sparsity
                xs = [d[0] for d in drawn[label]]
                assert len(xs) == len(points), label
                assert all(abs(x - p[0]) < 0.02 for x, p in zip(xs, points, strict=True)), label
                assert [d[1:] for d in drawn[label]] == approx([p[1:] for p in points]), (
                    f"{ax.get_title()}: {label}"
                )


def test_oracle_vs_sparsity_plots_greedy_and_oracle_from_the_oracle_table(varied, draw):
    got = panels(draw(varied, "oracle_vs_sparsity"))
    assert set(got) == PANELS
    for model in MODELS:
        for method in PRUNING[model]:
            ax = got[f"{model}: {method}"]
            expected = {
                label: interval_points(
                    line_rows(
                        varied,
                        "oracle",
                        "accuracy, ci_low, ci_high",
                        model,
                        method,
                        "unstructured",
                        True,
                        "AND dataset = 'all' AND decode = ? AND complete",
                        [decode],
                    )
                )
                for decode, label in (("greedy", "greedy"), ("oracle", "oracle (any decode)"))
            }
            assert_series(errorbars(ax), expected, ax.get_title())
    # sparsegpt left its first item undecoded: its oracle is incomplete and not drawn
    assert [x for x, *_ in errorbars(got["a: sparsegpt"])["oracle (any decode)"]] == [0.0]
    assert [x for x, *_ in errorbars(got["a: sparsegpt"])["greedy"]] == [0.0, 0.5]


def test_position_bias_shows_each_format_from_the_position_bias_table(varied, draw):
    got = {
        ax.get_title().split("\n")[0]: ax for ax in panels(draw(varied, "position_bias")).values()
    }
    assert set(got) == {f"{m}: {FORMATS[f]}" for m in MODELS for f in ("candidates", "mc")}
    for model in MODELS:
        for fmt in ("candidates", "mc"):
            ax = got[f"{model}: {FORMATS[fmt]}"]
            rows = varied.execute(
                "SELECT method, structure, sparsity, bits, position, share FROM position_bias "
                "WHERE dataset = 'all' AND model = ? AND format = ? "
                "AND NOT regexp_matches(method, '^noise[0-9]+-') "
                "ORDER BY method <> 'dense', method, structure, sparsity",
                [model, fmt],
            ).fetchall()
            ckpts = list(dict.fromkeys(r[:4] for r in rows))
            positions = [t.get_text() for t in ax.get_xticklabels()]
            assert positions == sorted({r[4] for r in rows}, key=lambda p: (p == "none", p))
            assert ("none" in positions) == (fmt == "candidates")
            # each row names its checkpoint (a quantized one by method and grid)
            labels = [t.get_text() for t in ax.get_yticklabels()]
            assert len(labels) == len(ckpts)
            for label, (method, st, sp, bits) in zip(labels, ckpts, strict=True):
                if method == "dense":
                    assert label == "dense"
                elif bits is not None:
                    assert label == f"{method} {st}", label  # no sparsity: it is 0
                else:
                    sfx = "" if st == "unstructured" else f" {st}"
                    assert label == f"{method}{sfx} {sp:.2f}"
            (image,) = ax.get_images()
            grid = image.get_array().tolist()
            expected = [[0.0] * len(positions) for _ in ckpts]
            for *ck, position, share in rows:
                expected[ckpts.index(tuple(ck))][positions.index(position)] = share
            assert grid == [approx(line) for line in expected], ax.get_title()


# accuracy_vs_size: model -> line label -> the (method, structure) checkpoints on the line; a
# line that is not an N:M point alone starts at the dense model
SIZE_LINES = {
    "a": {
        "wanda": [("wanda", "unstructured")],
        "wanda 2:4": [("wanda", "2:4")],
        "sparsegpt": [("sparsegpt", "unstructured")],
        "rtn g128": [("rtn", "int4-g128")],
        "gptq g128": [("gptq", "int4-g128"), ("gptq", "int3-g128")],
    },
    "b": {"wanda": [("wanda", "unstructured")]},
}
SIZE_ALONE = {"wanda 2:4"}
MC_ONLY_PANEL = "MC-only rate (mc right, open wrong)"


def test_accuracy_vs_size_plots_each_format_and_the_mc_only_rate_by_relative_size(varied, draw):
    got = panels(draw(varied, "accuracy_vs_size"))
    titles = [*FORMATS.values(), MC_ONLY_PANEL]
    assert set(got) == {f"{m}: {t}" for m in MODELS for t in titles}
    assert sorted(SIZE_LINES) == MODELS
    for model in MODELS:
        for fmt in [*FORMATS, "mc_only"]:
            title = FORMATS.get(fmt, MC_ONLY_PANEL)
            ax = got[f"{model}: {title}"]
            if fmt == "mc_only":
                source = (
                    "SELECT c.relative_size, t.mc_only_rate, t.mc_only_ci_low, t.mc_only_ci_high "
                    "FROM mc_only t JOIN checkpoints c USING (model, method, structure, sparsity) "
                    "WHERE t.dataset = 'all' AND t.model = $model"
                )
            else:
                source = (
                    "SELECT c.relative_size, t.accuracy, t.ci_low, t.ci_high "
                    "FROM accuracy t JOIN checkpoints c USING (model, method, structure, sparsity) "
                    "WHERE t.dataset = 'all' AND t.model = $model AND t.format = $format"
                )
            params = {"model": model} | ({} if fmt == "mc_only" else {"format": fmt})
            expected = {}
            for label, members in SIZE_LINES[model].items():
                where = " OR ".join(
                    f"(t.method = $m{k} AND t.structure = $s{k})" for k in range(len(members))
                )
                if label not in SIZE_ALONE:
                    where += " OR t.method = 'dense'"
                extra = {f"m{k}": m for k, (m, _) in enumerate(members)}
                extra |= {f"s{k}": s for k, (_, s) in enumerate(members)}
                rows = varied.execute(
                    f"{source} AND ({where}) ORDER BY c.relative_size", params | extra
                ).fetchall()
                expected[label] = interval_points(rows)
            assert_series(errorbars(ax), expected, ax.get_title())
            dense = varied.execute(f"{source} AND t.method = 'dense'", params).fetchall()
            dense = [r[:2] for r in dense]
            assert_series(lines(ax), {"dense": dense}, ax.get_title())


def gguf_source_database(tmp: Path) -> duckdb.DuckDBPyConnection:
    """The metric tables of one model whose source is a GGUF file that stores its weights at 5.0
    bits per weight (Q4_1; the `model_sources` row written by hand), its dense model and
    magnitude pruning at 30% and 50%: open answers lost on 1 and 2 of 4 items."""
    from metrics.test_sql import SQL, frame, row, selected_file

    items = ["i1", "i2", "i3", "i4"]

    def checkpoint(method, sparsity, open_wrong):
        return [
            dict(r, sparsity=sparsity)
            for item in items
            for r in (
                row(method, item, "open", item not in open_wrong, rank=1 + (item in open_wrong)),
                row(method, item, "mc", True),
                row(method, item, "candidates", True),
            )
        ]

    dense = checkpoint("dense", 0.0, [])
    logs = dense + checkpoint("magnitude", 0.3, ["i1"]) + checkpoint("magnitude", 0.5, ["i1", "i2"])
    frame(logs).write_parquet(tmp / "g.parquet")
    frame(dense).write_parquet(tmp / "p.parquet")
    con = duckdb.connect()
    create_views(
        con, [str(tmp / "g.parquet")], [selected_file(tmp, items)], [str(tmp / "p.parquet")]
    )
    con.execute("INSERT INTO model_sources VALUES ('m', 'gguf_file', 'Q4_1', 5.0)")
    run_metric_sql(con, SQL, None)
    return con


def test_accuracy_vs_size_never_draws_pruning_as_adding_bits(tmp_path, draw):
    """A dense model from a 5-bit GGUF and its pruned checkpoints (stored, like every checkpoint
    the pipeline makes, from the 16-bit import): the size axis is relative to the dense model,
    so the dense star sits at 1 and every pruned point left of it, smaller at higher sparsity;
    the axis label, the title and the report caption say what the axis is, and the panels say
    what the source file stores."""
    con = gguf_source_database(tmp_path)
    sizes = con.execute(
        "SELECT sparsity, weight_bits, relative_size FROM checkpoints ORDER BY sparsity"
    ).fetchall()
    # the dense row keeps its source's precision in weight_bits; its relative size is 1
    assert sizes == [
        (0.0, 5.0, 1.0),
        (0.3, pytest.approx(16 * 0.7 + 1), pytest.approx((16 * 0.7 + 1) / 16)),
        (0.5, 16 * 0.5 + 1, (16 * 0.5 + 1) / 16),
    ]
    fig = draw(con, "accuracy_vs_size")
    got = panels(fig)
    # each panel's values by sparsity, from the tables (open: 1, 0.75, 0.5; MC-only 0, .25, .5)
    values = {
        "open": con.execute(
            "SELECT accuracy, sparsity FROM accuracy WHERE dataset = 'all' AND format = 'open'"
        ).fetchall(),
        "mc_only": con.execute(
            "SELECT mc_only_rate, sparsity FROM mc_only WHERE dataset = 'all'"
        ).fetchall(),
    }
    for fmt, title in (("open", FORMATS["open"]), ("mc_only", MC_ONLY_PANEL)):
        ax = got[f"m: {title}"]
        sparsity_of = dict(values[fmt])
        assert len(sparsity_of) == 3  # the values tell the checkpoints apart
        dense_x = [x for x, _ in lines(ax)["dense"]]
        points = errorbars(ax)["magnitude"]
        by_sparsity = sorted((sparsity_of[y], x) for x, y, _lo, _hi in points)
        assert [s for s, _ in by_sparsity] == [0.0, 0.3, 0.5] and dense_x == [1.0]
        xs = [x for _, x in by_sparsity]
        assert all(a > b for a, b in zip(xs[:-1], xs[1:], strict=True)), (title, by_sparsity)
        assert max(xs) == 1.0
        label = ax.get_xlabel()
        assert "relative to dense" in label and "16-bit" in label, label
        assert "source file: Q4_1, 5 bits per weight, not on this axis" in label, label
    title = fig._suptitle.get_text()
    assert "relative to the dense model" in title and "16 bits per weight" in title
    caption = (ROOT / "workflow/report/accuracy_vs_size.rst").read_text()
    assert "relative_size" in caption and "dense model" in caption


# --------------------------------------------------------------------------------------------
# The concept figures, on the hand-built concept tables of test_concepts_sql (one model 'm',
# benchmarks d/en and d/es, pruned method 'w'). fdr_q = 1: every concept whose open drop exceeds
# its languages' is drawn as damaged (two of the three tested), so the damage figure has bars.


@pytest.fixture(scope="module")
def concepts(tmp_path_factory):
    from concepts.test_concepts_sql import gaps_db

    con = gaps_db(tmp_path_factory.mktemp("concepts"), GapSettings(min_support=2, fdr_q=1.0))
    yield con
    con.close()


def test_concept_coverage_histograms_each_benchmark_from_chi_bench(concepts, draw):
    (model,) = [r[0] for r in concepts.execute("SELECT DISTINCT model FROM chi_bench").fetchall()]
    got = panels(draw(concepts, "concept_coverage"))
    n = concepts.execute(
        "SELECT count(*) FROM chi_bench WHERE model = ? AND lang = 'all'", [model]
    ).fetchall()[0][0]
    ax = got[f"{model}: {n} SAE concepts"]
    assert len(got) == 1

    def values(where):
        return [
            v
            for (v,) in concepts.execute(
                f"SELECT chi_bench FROM chi_bench WHERE model = ? AND {where} "
                "AND n_active > 0 AND chi_bench > 0",
                [model],
            ).fetchall()
        ]

    def missing(where):
        return concepts.execute(
            "SELECT count(*) FILTER (WHERE n_active = 0) FROM chi_bench "
            f"WHERE model = ? AND {where}",
            [model],
        ).fetchall()[0][0]

    expected = {}
    for lang in ("en", "es"):
        where = f"lang = '{lang}'"
        expected[f"d/{lang} (missing: {missing(where)})"] = values(where)
    where = "lang = 'all'"
    expected[f"across benchmarks (missing: {missing(where)})"] = values(where)
    hists = {p.get_label(): p.get_xy() for p in ax.patches}
    assert sorted(hists) == sorted(expected)
    for label, vals in expected.items():
        xy = hists[label]  # a step outline: (edge, 0), (edge, count), (next edge, count), ...
        edges, counts = xy[0::2, 0], xy[1::2, 1][:-1]
        assert counts.tolist() == np.histogram(vals, bins=edges)[0].tolist(), label
        assert counts.sum() == len(vals) > 0
    thresholds = concepts.execute(
        "SELECT any_value(under_threshold), any_value(over_threshold) FROM chi_bench "
        "WHERE model = ? AND lang = 'all'",
        [model],
    ).fetchall()[0]
    assert [float(line.get_xdata()[0]) for line in ax.get_lines()] == approx(thresholds)


def bars(container) -> list:
    """(value, y centre) of each bar of a horizontal bar container."""
    return [(p.get_width(), p.get_y() + p.get_height() / 2) for p in container.patches]


def test_concept_extremes_rank_chi_bench_and_the_dense_open_chi_model(concepts, draw):
    got = panels(draw(concepts, "concept_extremes"))
    model = "m"
    bench = (
        "SELECT concept, chi_bench FROM chi_bench WHERE model = 'm' AND dataset = 'all' "
        "AND n_active > 0"
    )
    dense = (
        "SELECT concept, chi_model FROM chi_model WHERE model = 'm' AND dataset = 'all' "
        "AND method = 'dense' AND format = 'open' AND supported AND population = 'pool'"
    )
    expected = {
        "best covered": f"{bench} ORDER BY chi_bench DESC, concept LIMIT 10",
        "least covered (active)": f"{bench} ORDER BY chi_bench, concept LIMIT 10",
        "dense model strongest": f"{dense} ORDER BY chi_model DESC, concept LIMIT 10",
        "dense model weakest (gaps)": f"{dense} ORDER BY chi_model, concept LIMIT 10",
    }
    assert set(got) == {f"{model}: {k}" for k in expected}
    for title, sql in expected.items():
        ax = got[f"{model}: {title}"]
        rows = concepts.execute(sql).fetchall()
        assert rows, title
        (container,) = [c for c in ax.containers if isinstance(c, BarContainer)]
        drawn = bars(container)
        assert [w for w, _ in drawn] == approx([v for _, v in rows]), title
        assert [y for _, y in drawn] == sorted((y for _, y in drawn), reverse=True)  # 1st on top
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert [label.split()[0] for label in labels] == [f"#{c}" for c, _ in rows], title
    # the dense model's open chi_model is not its mc one on this fixture (concept 0)
    mc = concepts.execute(dense.replace("'open'", "'mc'") + " ORDER BY concept").fetchall()
    assert mc != concepts.execute(f"{dense} ORDER BY concept").fetchall()


def test_concept_damage_draws_the_open_and_mc_drops_of_the_damaged_concepts(concepts, draw):
    got = panels(draw(concepts, "concept_damage"))
    methods = concepts.execute("SELECT DISTINCT model, method FROM concept_damage").fetchall()
    assert set(got) == method_titles(methods)
    for model, method in methods:
        ax = got[f"{model}: {method}"]
        rows = concepts.execute(
            "SELECT concept, drop_open, drop_open_ci_low, drop_open_ci_high, drop_mc, "
            "expected_drop_open FROM report_damaged_concepts "
            "WHERE method_peak AND model = ? AND method = ? "
            "ORDER BY excess_open DESC, q_open, sparsity, structure, concept LIMIT 12",
            [model, method],
        ).fetchall()
        assert len(rows) >= 2
        containers = {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}
        assert sorted(containers) == ["mc", "open"]
        open_bars, mc_bars = bars(containers["open"]), bars(containers["mc"])
        assert [w for w, _ in open_bars] == approx([r[1] for r in rows])
        assert [w for w, _ in mc_bars] == approx([r[4] or 0.0 for r in rows])
        # the open bar of a concept stands just above its mc bar, the first concept on top
        assert [y for _, y in open_bars] == sorted((y for _, y in open_bars), reverse=True)
        assert all(o > m for (_, o), (_, m) in zip(open_bars, mc_bars, strict=True))
        (err,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        segments = err.lines[2][0].get_segments()
        assert [(s[:, 0].min(), s[:, 0].max()) for s in segments] == approx(
            [(lo, hi) for _, _, lo, hi, *_ in rows]
        )
        (expected_drop,) = [c for c in ax.collections if c.get_label() == "its languages' drop"]
        offsets = expected_drop.get_offsets()
        assert offsets[:, 0].tolist() == approx([r[5] for r in rows])
        assert offsets[:, 1].tolist() == approx([y for _, y in open_bars])
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert [label.split()[0] for label in labels] == [f"#{r[0]}" for r in rows]


def test_every_listed_figure_has_its_drawing_and_no_other():
    """figures/names.py lists the figures the rules, report and tests read; make_figures draws
    each by name from metrics.steps.DRAW: the two name the same figures."""
    assert set(DRAW) == {*FIGURES, *CONCEPT_FIGURES}
