"""The SQL metric tables on a hand-built log whose expected values are worked out by hand."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest

from benchmark_illusion.aggregate import create_views, run_sql_files
from benchmark_illusion.schema import LOG_SCHEMA

ROOT = Path(__file__).resolve().parents[1]
SQL = sorted(str(p) for p in (ROOT / "workflow/sql").glob("*.sql"))


def row(method, item, fmt, correct, decode=None, sample=0, answer=None, rank=None):
    decode = decode or {"mc": "loglik"}.get(fmt, "greedy")
    return dict(model="m", method=method, structure="none" if method == "dense" else "unstructured",
                sparsity=0.0 if method == "dense" else 0.5, dataset="d", lang="en", item_id=item, format=fmt,
                decode=decode, sample=sample, output=answer or "", answer_norm=answer, correct=correct,
                gold_rank=rank, seed=0)


def frame(rows):
    return pl.DataFrame(rows, schema=LOG_SCHEMA)


def selected_file(tmp_path, ids):
    path = tmp_path / "selected" / "m" / "d" / "en.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"item_id": ids, "dataset": ["d"] * len(ids), "lang": ["en"] * len(ids)}).write_parquet(path)
    return str(path)


@pytest.fixture
def db(tmp_path):
    dense, pruned = [], []
    for item in ("i1", "i2", "i3", "i4"):
        dense += [row("dense", item, "open", True, rank=1), row("dense", item, "mc", True),
                  row("dense", item, "candidates", item != "i4")]
    pruned += [
        # i1: MC-only; the top beam is wrong, another beam right; samples a,a,a (wrong), b,b (right)
        row("w", "i1", "open", False, rank=3), row("w", "i1", "mc", True), row("w", "i1", "candidates", True),
        *[row("w", "i1", "open", k == 2, decode="beam", sample=k) for k in range(5)],
        *[row("w", "i1", "open", False, decode="sample", sample=k, answer="a") for k in range(3)],
        *[row("w", "i1", "open", True, decode="sample", sample=3 + k, answer="b") for k in range(2)],
        row("w", "i1", "oneshot", False),
        # i2: MC-only and nothing recovers it
        row("w", "i2", "open", False, rank=40), row("w", "i2", "mc", True), row("w", "i2", "candidates", False),
        *[row("w", "i2", "open", False, decode="beam", sample=k) for k in range(5)],
        row("w", "i2", "open", False, decode="sample", sample=0, answer="x"),
        row("w", "i2", "oneshot", False),
        # i3: wrong in mc too; oneshot right; a tie of one right 'b' and one wrong 'c' sample
        row("w", "i3", "open", False, rank=7), row("w", "i3", "mc", False), row("w", "i3", "candidates", False),
        row("w", "i3", "open", True, decode="sample", sample=0, answer="b"),
        row("w", "i3", "open", False, decode="sample", sample=1, answer="c"),
        row("w", "i3", "oneshot", True),
        # i4: still right in open: no recovery decode ran
        row("w", "i4", "open", True, rank=1), row("w", "i4", "mc", True), row("w", "i4", "candidates", True),
    ]
    frame(dense).write_parquet(tmp_path / "dense.parquet")
    frame(pruned).write_parquet(tmp_path / "w.parquet")
    con = duckdb.connect()
    create_views(con, [str(tmp_path / "dense.parquet"), str(tmp_path / "w.parquet")],
                 [selected_file(tmp_path, ["i1", "i2", "i3", "i4"])], [str(tmp_path / "dense.parquet")])
    run_sql_files(con, SQL)
    return con


def test_item_outcomes_by_hand(db):
    got = {r[0]: r[1:] for r in db.execute(
        "SELECT item_id, open_correct, mc_correct, mc_only, beam_top, beam_any, sample_pass, sample_majority, "
        "oneshot, recovered, status, gold_rank, dense_gold_rank FROM item_outcomes WHERE method = 'w'").fetchall()}
    assert got["i1"] == (False, True, True, False, True, True, False, False, True, "demoted", 3, 1)
    assert got["i2"] == (False, True, True, False, False, False, False, False, False, "erased", 40, 1)
    assert got["i3"] == (False, False, False, None, None, True, True, True, True, "erased", 7, 1)
    assert got["i4"] == (True, True, False, None, None, None, None, None, None, "correct", 1, 1)


def test_mc_only_counts_by_hand(db):
    rows = db.execute("SELECT method, n_items, n_mc_only, mc_only_rate, n_mc_wrong, n_open_wrong, "
                      "n_mc_only_recovered, n_demoted, n_erased FROM mc_only ORDER BY method").fetchall()
    assert rows[0] == ("dense", 4, 0, 0.0, 0, 0, 0, 0, 0)
    assert rows[1] == ("w", 4, 2, 0.5, 1, 3, 1, 1, 2)


def test_accuracy_by_hand(db):
    acc = {r[0]: r[1:] for r in db.execute(
        "SELECT format, n_items, accuracy FROM accuracy WHERE method = 'w'").fetchall()}
    # open: only i4 right of 4; recovery rows do not count as open answers
    assert acc["open"] == (4, 0.25)
    assert acc["mc"] == (4, 0.75)  # i1, i2, i4
    assert acc["candidates"] == (4, 0.5)
    assert acc["oneshot"] == (3, pytest.approx(1 / 3))


def test_selection_by_hand(db):
    # The pool here is the dense log: 4 items right in open and mc, i4 wrong in candidates.
    assert db.execute("SELECT n_pool, open_correct, candidates_correct, mc_correct, both_correct, n_selected "
                      "FROM selection").fetchone() == (4, 4, 3, 4, 4, 4)


def test_zero_mc_only_and_one_language(tmp_path):
    rows = [row("dense", "i1", "open", True), row("dense", "i1", "mc", True),
            row("w", "i1", "open", True), row("w", "i1", "mc", True)]
    frame(rows).write_parquet(tmp_path / "g.parquet")
    con = duckdb.connect()
    create_views(con, [str(tmp_path / "g.parquet")], [selected_file(tmp_path, ["i1"])], [str(tmp_path / "g.parquet")])
    run_sql_files(con, SQL)
    assert con.execute("SELECT n_mc_only, mc_only_rate, n_demoted, n_erased FROM mc_only WHERE method = 'w'").fetchone() \
        == (0, 0.0, 0, 0)
