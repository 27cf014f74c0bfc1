"""The paired test of a checkpoint against its floor (metrics/illusion.py): who is compared with
whom, the numbers by hand, and how often it flags by chance and by design."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from benchmark_illusion.metrics import exact, illusion


def outcomes(method, items, structure="unstructured", sparsity=0.3, lang="en"):
    """item_outcomes rows: items = {item_id: (open right, mc right)}; both verdicts alike."""
    return [
        {
            "model": "m",
            "method": method,
            "structure": structure,
            "sparsity": sparsity,
            "dataset": "d",
            "lang": lang,
            "item_id": i,
            "mc_only": mc and not op,
            "mc_only_sentence": mc and not op,
            "open_correct": op,
            "open_correct_sentence": op,
        }
        for i, (op, mc) in items.items()
    ]


def test_families_pair_replicates_with_their_twins_and_the_controls_with_theirs():
    keys = [
        ("dense", "none", 0.0),
        ("wanda", "unstructured", 0.3),
        ("wanda-s7", "unstructured", 0.3),
        ("damage0-wanda", "unstructured", 0.3),
        ("damage0-wanda-s7", "unstructured", 0.3),
        ("noise0-wanda", "unstructured", 0.3),
        ("placebo-wanda", "unstructured", 0.3),
        ("forbid", "none", 0.0),
        ("rtn", "int4-g128", 0.0),  # no twin: no test
    ]
    fams = illusion.families(keys)
    assert fams[("wanda", "unstructured", 0.3, "damage")]["members"] == ["wanda", "wanda-s7"]
    assert fams[("wanda", "unstructured", 0.3, "damage")]["twins"] == [
        "damage0-wanda",
        "damage0-wanda-s7",
    ]
    assert fams[("wanda", "unstructured", 0.3, "size")]["twins"] == ["noise0-wanda"]
    placebo = fams[("placebo-wanda", "unstructured", 0.3, "damage")]
    assert placebo["control"] == "negative" and placebo["members"] == ["placebo-wanda"]
    assert placebo["twins"] == ["damage0-wanda", "damage0-wanda-s7"]
    forbid = fams[("forbid", "none", 0.0, "damage")]
    assert forbid["control"] == "positive" and forbid["twins"] == ["dense"]
    assert not any(k[0] == "rtn" for k in fams)


def test_one_checkpoint_one_twin_by_hand():
    # 10 items: the checkpoint MC-only on 1-5, the twin on 5-6; both open-wrong on 1-6 and 9
    ckpt = {f"i{k}": (k > 5 and k != 9, k != 9) for k in range(1, 11)}
    twin = {f"i{k}": (k > 6 and k != 9, k in (5, 6) or k > 6) for k in range(1, 11)}
    twin["i9"] = (False, False)
    frame = pl.DataFrame(outcomes("w", ckpt) + outcomes("damage0-w", twin))
    rows = illusion.illusion_rows(frame, 0.95, 0, 200)
    (row,) = [r for r in rows if r["verdict"] == "strict" and r["lang"] == "all"]
    assert row["n_items"] == 10 and row["mc_only"] == 0.5 and row["floor_mc_only"] == 0.2
    assert (row["n_discordant_up"], row["n_discordant_down"]) == (4, 1)
    assert row["mc_only_diff"] == pytest.approx(0.3)
    assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx(exact.bonett_price(4, 1, 10))
    # retention: the checkpoint 5 of 6 open-wrong items, the twin 2 of 7
    assert row["retention"] == pytest.approx(5 / 6) and row["floor_retention"] == pytest.approx(
        2 / 7
    )
    lo, hi = exact.newcombe_difference(5, 6, 2, 7)
    assert (row["retention_diff_ci_low"], row["retention_diff_ci_high"]) == pytest.approx((lo, hi))
    assert row["ci_method"] == "exact" and row["flagged"] == (row["diff_ci_low"] > 0)
    assert (row["mc_only_ci_low"], row["mc_only_ci_high"]) == pytest.approx(exact.wilson(5, 10))


def simulate(n_items, p_ckpt, p_twin, rho, trials, seed):
    """Share of trials flagged: per item a shared difficulty makes the checkpoint's and the
    twin's MC-only outcomes correlated (rho: the weight of the shared draw)."""
    rng = np.random.default_rng(seed)
    flagged = 0
    for t in range(trials):
        shared = rng.random(n_items)
        own_c, own_t = rng.random(n_items), rng.random(n_items)
        u_c = np.where(rng.random(n_items) < rho, shared, own_c)
        u_t = np.where(rng.random(n_items) < rho, shared, own_t)
        c, w = u_c < p_ckpt, u_t < p_twin
        items_c = {f"i{k}": (not c[k], True) for k in range(n_items)}
        items_t = {f"i{k}": (not w[k], True) for k in range(n_items)}
        frame = pl.DataFrame(outcomes("w", items_c) + outcomes("damage0-w", items_t))
        rows = illusion.illusion_rows(frame, 0.95, t, 1)
        flagged += next(r for r in rows if r["lang"] == "all" and r["verdict"] == "strict")[
            "flagged"
        ]
    return flagged / trials


@pytest.mark.parametrize("n_items", [14, 22])
def test_the_test_flags_noise_against_noise_rarely_and_a_real_gap_mostly(n_items):
    # a negative case: checkpoint and twin exchangeable (the placebo's situation)
    for p in (0.15, 0.35):
        assert simulate(n_items, p, p, 0.5, 300, 1) <= 0.05, p
    # a positive case: the checkpoint loses open answers its twin keeps (the forbid control's
    # situation, weaker): flagged in most trials
    assert simulate(n_items, 0.7, 0.1, 0.5, 200, 2) >= 0.8


def test_replicates_widen_the_interval_when_they_disagree():
    # two replicates of the checkpoint: one MC-only on 6 of 12, one on none; one twin on 1
    a = {f"i{k}": (k >= 6, True) for k in range(12)}
    b = {f"i{k}": (True, True) for k in range(12)}
    twin = {f"i{k}": (k != 0, True) for k in range(12)}
    frame = pl.DataFrame(outcomes("w", a) + outcomes("w-s1", b) + outcomes("damage0-w", twin))
    # -s<seed> names a replicate of the pipeline's methods only: "w-s1" (a variant's name) is a
    # checkpoint of its own, without a twin, so without a test
    keys = {("w", "unstructured", 0.3), ("w-s1", "unstructured", 0.3)}
    fams = illusion.families(keys | {("damage0-w", "unstructured", 0.3)})
    assert list(fams) == [("w", "unstructured", 0.3, "damage")]
    assert fams[("w", "unstructured", 0.3, "damage")]["members"] == ["w"]
    frame = frame.with_columns(
        pl.col("method").replace({"w": "wanda", "w-s1": "wanda-s1", "damage0-w": "damage0-wanda"})
    )
    rows = illusion.illusion_rows(frame, 0.95, 0, 500)
    (row,) = [r for r in rows if r["lang"] == "all" and r["verdict"] == "strict"]
    assert row["n_replicates"] == 2 and row["ci_method"] == "two_level"
    assert row["mc_only"] == pytest.approx(0.25)
    assert (row["replicate_diff_min"], row["replicate_diff_max"]) == pytest.approx(
        (-1 / 12, 5 / 12)
    )
    exact_lo, exact_hi = exact.bonett_price(
        row["n_discordant_up"], row["n_discordant_down"], row["n_items"]
    )
    assert row["diff_ci_low"] <= exact_lo and row["diff_ci_high"] >= exact_hi
