"""The illusion, asked directly: does a compressed checkpoint keep mc while losing open answers
more than its floor (noise of the same damage) does? Computed between the SQL files
(aggregate.PYTHON_STEPS, before 55_illusion.sql), from item_outcomes.

Per compressed checkpoint family (a method's replicates: <method> and <method>-s<seed>, the
same structure and sparsity), floor (the kinds of twins evaluated: damage, size, structure),
verdict (strict: `correct`; sentence: `correct_sentence`) and benchmark (and pooled: dataset =
lang = 'all'), on the selected items every checkpoint and twin was evaluated on:

  mc_only         share of items with mc right and open wrong, the checkpoint's (averaged over
                  its replicates) and the floor's (averaged over its twins: seeds x the source's
                  replicates)
  mc_only_diff    checkpoint minus floor, paired on items: the mean over items of the per-item
                  difference of the two averages
  retention       P(mc right | open wrong): of the items whose open answer is wrong, the share mc
                  still gets right; the checkpoint's and the floor's, and their difference
  flagged         the difference's interval lies above 0: the checkpoint keeps mc while losing
                  open answers more than noise of the same damage does

Controls: the positive control `forbid` (the dense weights, gold first tokens forbidden in every
decode) has damage 0, so its floor is the dense model (floor 'damage', twin 'dense'); a placebo
(placebo-<source>, noise at the source's damage) is compared with its source's twins.

Intervals (level: metrics.ci_level), valid at 10-40 items:
  rates           Wilson score interval of the count (Wilson 1927)
  mc_only_diff    Bonett-Price adjusted Wald interval for paired proportions, from the discordant
                  counts (Bonett & Price 2012; Fagerland, Lydersen & Laake 2014)
  retention_diff  Newcombe's hybrid score interval for two independent proportions (Newcombe
                  1998, method 10): the two conditional rates are on different items (each model's
                  open-wrong items), treated as independent samples
With several replicates or twins, the counts are the averages over them (fractional) and the
interval is the hull of that interval and a two-level percentile bootstrap (replicates and twins
drawn with replacement, then items within each benchmark), so that a disagreement between
replicates widens it (ci_method 'two_level'). Pooled rows are stratified by benchmark: the
pooled difference is the size-weighted mean of the benchmarks' differences, and the bootstrap
resamples within each benchmark.
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl

from benchmark_illusion.compression.methods import NAMES
from benchmark_illusion.compression.names import (
    FORBID,
    parse_placebo,
    parse_replicate,
    parse_twin,
)
from benchmark_illusion.metrics import exact

REPLICATED = NAMES
VERDICTS = {
    "strict": ("mc_only", "open_correct"),
    "sentence": ("mc_only_sentence", "open_correct_sentence"),
}

COLUMNS = {
    "model": pl.String,
    "method": pl.String,
    "structure": pl.String,
    "sparsity": pl.Float64,
    "floor": pl.String,
    "twin": pl.String,
    "control": pl.String,
    "verdict": pl.String,
    "dataset": pl.String,
    "lang": pl.String,
    "n_items": pl.Int64,
    "n_replicates": pl.Int64,
    "n_twins": pl.Int64,
    "mc_only": pl.Float64,
    "mc_only_ci_low": pl.Float64,
    "mc_only_ci_high": pl.Float64,
    "floor_mc_only": pl.Float64,
    "floor_mc_only_ci_low": pl.Float64,
    "floor_mc_only_ci_high": pl.Float64,
    "n_discordant_up": pl.Float64,
    "n_discordant_down": pl.Float64,
    "mc_only_diff": pl.Float64,
    "diff_ci_low": pl.Float64,
    "diff_ci_high": pl.Float64,
    "replicate_diff_min": pl.Float64,
    "replicate_diff_max": pl.Float64,
    "n_open_wrong": pl.Float64,
    "retention": pl.Float64,
    "retention_ci_low": pl.Float64,
    "retention_ci_high": pl.Float64,
    "floor_n_open_wrong": pl.Float64,
    "floor_retention": pl.Float64,
    "floor_retention_ci_low": pl.Float64,
    "floor_retention_ci_high": pl.Float64,
    "retention_diff": pl.Float64,
    "retention_diff_ci_low": pl.Float64,
    "retention_diff_ci_high": pl.Float64,
    "ci_method": pl.String,
    "flagged": pl.Boolean,
}


def families(methods: list[str]) -> dict[tuple, dict]:
    """Group a model's checkpoint keys (method, structure, sparsity) into the paired tests'
    families: {(family method, structure, sparsity, floor kind): {'members': [methods],
    'twins': [methods], 'twin': label, 'control': None|'positive'|'negative'}}. A family without
    any twin of a kind has no entry for it."""
    keys = set(methods)
    members: dict[tuple, list] = {}
    twins: dict[tuple, list] = {}
    control: dict[tuple, str] = {}
    for method, structure, sparsity in keys:
        if method == "dense":
            continue
        twin = parse_twin(method)
        if twin is not None:
            kind, _, source = twin
            base = parse_replicate(source, REPLICATED)[0]
            twins.setdefault((base, structure, sparsity, kind), []).append(method)
            continue
        placebo = parse_placebo(method)
        if placebo is not None:
            members.setdefault((method, structure, sparsity), []).append(method)
            control[(method, structure, sparsity)] = "negative"
            continue
        if method == FORBID:
            members.setdefault((method, structure, sparsity), []).append(method)
            control[(method, structure, sparsity)] = "positive"
            continue
        base = parse_replicate(method, REPLICATED)[0]
        members.setdefault((base, structure, sparsity), []).append(method)
    out = {}
    for (fam, structure, sparsity), ms in sorted(members.items()):
        ctl = control.get((fam, structure, sparsity))
        if ctl == "positive":
            if any(k[0] == "dense" for k in keys):
                out[(fam, structure, sparsity, "damage")] = {
                    "members": sorted(ms),
                    "twins": ["dense"],
                    "twin": "dense",
                    "control": ctl,
                }
            continue
        source = parse_placebo(fam) if ctl == "negative" else fam
        base = parse_replicate(source, REPLICATED)[0]
        for (b, st, sp, kind), ts in sorted(twins.items()):
            if (b, st, sp) == (base, structure, sparsity):
                out[(fam, structure, sparsity, kind)] = {
                    "members": sorted(ms),
                    "twins": sorted(ts),
                    "twin": kind,
                    "control": ctl,
                }
    return out


def _averaged(frame: pl.DataFrame, methods: list[str], items: list, column: str) -> np.ndarray:
    """[len(methods), len(items)] the 0/1 column per method and item (NaN where missing)."""
    out = np.full((len(methods), len(items)), np.nan)
    pos = {k: i for i, k in enumerate(items)}
    for r, m in enumerate(methods):
        part = frame.filter(pl.col("method") == m)
        for key, v in zip(
            zip(part["dataset"], part["lang"], part["item_id"], strict=True),
            part[column].to_list(),
            strict=True,
        ):
            if key in pos and v is not None:
                out[r, pos[key]] = float(v)
    return out


def _stats(x: np.ndarray, y: np.ndarray, xo: np.ndarray, yo: np.ndarray) -> dict:
    """Point values of replicate-averaged arrays over items: x, y the mc_only indicators
    (checkpoint, floor), xo, yo the open-wrong indicators; retention uses mc = mc_only given
    open wrong."""
    xm, ym = x.mean(0), y.mean(0)
    xow, yow = xo.mean(0), yo.mean(0)
    return {
        "k": xm.sum(),
        "fk": ym.sum(),
        "b": np.clip(xm - ym, 0, None).sum(),
        "c": np.clip(ym - xm, 0, None).sum(),
        "m": xow.sum(),
        "fm": yow.sum(),
    }


def _test(
    x, y, xo, yo, strata: np.ndarray, level: float, rng: np.random.Generator, n_boot: int
) -> dict:
    """One row's values and intervals; x, y: [replicates, items] mc_only, xo, yo: open wrong."""
    n = x.shape[1]
    s = _stats(x, y, xo, yo)
    out = {
        "n_items": n,
        "n_replicates": x.shape[0],
        "n_twins": y.shape[0],
        "mc_only": s["k"] / n,
        "floor_mc_only": s["fk"] / n,
        "n_discordant_up": s["b"],
        "n_discordant_down": s["c"],
        "mc_only_diff": (s["k"] - s["fk"]) / n,
        "n_open_wrong": s["m"],
        "retention": s["k"] / s["m"] if s["m"] > 0 else None,
        "floor_n_open_wrong": s["fm"],
        "floor_retention": s["fk"] / s["fm"] if s["fm"] > 0 else None,
    }
    out["mc_only_ci_low"], out["mc_only_ci_high"] = exact.wilson(s["k"], n, level)
    out["floor_mc_only_ci_low"], out["floor_mc_only_ci_high"] = exact.wilson(s["fk"], n, level)
    out["diff_ci_low"], out["diff_ci_high"] = exact.bonett_price(s["b"], s["c"], n, level)
    if s["m"] > 0:
        out["retention_ci_low"], out["retention_ci_high"] = exact.wilson(s["k"], s["m"], level)
    if s["fm"] > 0:
        lo, hi = exact.wilson(s["fk"], s["fm"], level)
        out["floor_retention_ci_low"], out["floor_retention_ci_high"] = lo, hi
    if s["m"] > 0 and s["fm"] > 0:
        out["retention_diff"] = out["retention"] - out["floor_retention"]
        lo, hi = exact.newcombe_difference(s["k"], s["m"], s["fk"], s["fm"], level)
        out["retention_diff_ci_low"], out["retention_diff_ci_high"] = lo, hi
    per_rep = [(x[r].sum() - y.mean(0).sum()) / n for r in range(x.shape[0])]
    out["replicate_diff_min"], out["replicate_diff_max"] = min(per_rep), max(per_rep)
    out["ci_method"] = "exact"
    if x.shape[0] > 1 or y.shape[0] > 1:
        out["ci_method"] = "two_level"
        boot = _two_level(x, y, xo, yo, strata, rng, n_boot)
        q = ((1 - level) / 2, (1 + level) / 2)
        for name, lo_key, hi_key in (
            ("rate", "mc_only_ci_low", "mc_only_ci_high"),
            ("floor", "floor_mc_only_ci_low", "floor_mc_only_ci_high"),
            ("diff", "diff_ci_low", "diff_ci_high"),
            ("ret_diff", "retention_diff_ci_low", "retention_diff_ci_high"),
        ):
            vals = boot[name][np.isfinite(boot[name])]
            if len(vals) and out.get(lo_key) is not None:
                lo, hi = np.quantile(vals, q)
                out[lo_key] = min(out[lo_key], float(lo))
                out[hi_key] = max(out[hi_key], float(hi))
    out["flagged"] = bool(out["diff_ci_low"] > 0)
    return out


def _two_level(x, y, xo, yo, strata, rng, n_boot: int) -> dict:
    """Bootstrap replicates: replicates and twins drawn with replacement, then items within
    each stratum (benchmark)."""
    n = x.shape[1]
    groups = [np.nonzero(strata == g)[0] for g in np.unique(strata)]
    res = {k: np.full(n_boot, np.nan) for k in ("rate", "floor", "diff", "ret_diff")}
    for b in range(n_boot):
        idx = np.concatenate([g[rng.integers(0, len(g), len(g))] for g in groups])
        reps_x = rng.integers(0, x.shape[0], x.shape[0])
        reps_y = rng.integers(0, y.shape[0], y.shape[0])
        xr, yr = x[reps_x][:, idx], y[reps_y][:, idx]
        xo_r, yo_r = xo[reps_x][:, idx], yo[reps_y][:, idx]
        k, fk = xr.mean(0).sum(), yr.mean(0).sum()
        m, fm = xo_r.mean(0).sum(), yo_r.mean(0).sum()
        res["rate"][b] = k / n
        res["floor"][b] = fk / n
        res["diff"][b] = (k - fk) / n
        if m > 0 and fm > 0:
            res["ret_diff"][b] = k / m - fk / fm
    return res


def illusion_rows(frame: pl.DataFrame, level: float, seed: int, n_boot: int) -> list[dict]:
    """Every row of the illusion test from item_outcomes' columns (model, method, structure,
    sparsity, dataset, lang, item_id, mc_only, mc_only_sentence, open_correct,
    open_correct_sentence)."""
    rows = []
    for (model,), part in frame.group_by(["model"], maintain_order=True):
        keys = set(
            zip(part["method"], part["structure"], part["sparsity"].cast(pl.Float64), strict=True)
        )
        fams = families(list(keys))
        for (fam, structure, sparsity, kind), spec in fams.items():
            one = part.filter(
                (pl.col("structure") == structure) & (pl.col("sparsity") == sparsity)
                | (pl.col("method") == "dense")
            )
            mine = one.filter(pl.col("method").is_in(spec["members"]))
            benches = sorted(set(zip(mine["dataset"], mine["lang"], strict=True)))
            for dataset, lang in [*benches, ("all", "all")]:
                sel = (
                    one
                    if dataset == "all"
                    else one.filter((pl.col("dataset") == dataset) & (pl.col("lang") == lang))
                )
                items = sorted(
                    set(
                        zip(
                            *(
                                sel.filter(pl.col("method").is_in(spec["members"]))[c]
                                for c in ("dataset", "lang", "item_id")
                            ),
                            strict=True,
                        )
                    )
                )
                if not items:
                    continue
                strata = np.array([f"{d}/{lg}" for d, lg, _ in items])
                for verdict, (mc_col, open_col) in VERDICTS.items():
                    x = _averaged(sel, spec["members"], items, mc_col)
                    y = _averaged(sel, spec["twins"], items, mc_col)
                    xo = 1 - _averaged(sel, spec["members"], items, open_col)
                    yo = 1 - _averaged(sel, spec["twins"], items, open_col)
                    # the items every member and twin has (a twin missing an item drops it)
                    keep = ~(np.isnan(x).any(0) | np.isnan(y).any(0))
                    keep &= ~(np.isnan(xo).any(0) | np.isnan(yo).any(0))
                    if not keep.any():
                        continue
                    rng = np.random.default_rng([seed, len(rows)])  # fixed row order: stable
                    vals = _test(
                        x[:, keep],
                        y[:, keep],
                        xo[:, keep],
                        yo[:, keep],
                        strata[keep],
                        level,
                        rng,
                        n_boot,
                    )
                    rows.append(
                        {
                            "model": model,
                            "method": fam,
                            "structure": structure,
                            "sparsity": float(sparsity),
                            "floor": kind,
                            "twin": spec["twin"],
                            "control": spec["control"],
                            "verdict": verdict,
                            "dataset": dataset,
                            "lang": lang,
                            **vals,
                        }
                    )
    return rows


def create_illusion_test(con: duckdb.DuckDBPyConnection, variables: dict) -> None:
    """Create table illusion_test (module docstring) from item_outcomes."""
    frame = con.sql(
        """SELECT model, method, structure, sparsity, dataset, lang, item_id, mc_only,
                  mc_only_sentence, open_correct, open_correct_sentence
           FROM item_outcomes ORDER BY ALL"""
    ).pl()
    rows = illusion_rows(
        frame,
        float(variables["ci_level"]),
        int(variables.get("bootstrap_seed", 0)),
        int(variables.get("bootstrap_replicates", 1000)),
    )
    df = pl.DataFrame(rows, schema=COLUMNS) if rows else pl.DataFrame(schema=COLUMNS)
    con.register("_illusion", df)
    try:
        con.execute("CREATE OR REPLACE TABLE illusion_test AS SELECT * FROM _illusion")
    finally:
        con.unregister("_illusion")
