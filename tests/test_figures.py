"""Figures from hand-built metric tables: every figure is written, also for grids the smoke run
does not cover (N:M checkpoints, two models, dense only)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from benchmark_illusion.aggregate import MetricSettings, create_views, run_metric_sql
from benchmark_illusion.figures import FIGURES, make_figures
from benchmark_illusion.schema import LOG_SCHEMA

ROOT = Path(__file__).resolve().parents[1]
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
    ).fetchone()[0]
    con.close()
    assert complete[0] > 0 and complete[1]
    assert false_rec == 1.0  # beam 0 hits the decoy on every item
    out = tmp_path / "figures"
    assert_pngs(make_figures(db, out), out)


def test_quantized_checkpoints_are_drawn_by_size_and_kept_out_of_the_sparsity_figures(tmp_path):
    from benchmark_illusion.aggregate import connect
    from benchmark_illusion.figures import _methods

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
    assert _methods(acc) == ["wanda"]  # no rtn/gptq panel or line at 'sparsity 0'
    assert size.filter(pl.col("method") == "gptq")["weight_bits"].to_list() == [
        3 + 19 / 128,
        4 + 20 / 128,
    ]
    out = tmp_path / "figures"
    assert_pngs(make_figures(db, out), out)
