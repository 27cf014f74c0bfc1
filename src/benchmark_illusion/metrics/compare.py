"""A paired comparison of two checkpoints of one model on one metric (`python -m
benchmark_illusion compare`): RTN against GPTQ at 4 bits, Wanda against SparseGPT at 50%.

The difference of two rates is the mean of a per-item difference over the items both
checkpoints have a value for (item_values), with a paired interval: much narrower than two
overlapping intervals suggest when the checkpoints agree on most items. As in `rates`
(25_rates.sql), a difference of two proportions (every value of both checkpoints 0 or 1, so
every per-item difference -1, 0 or 1) gets the Bonett-Price interval of its discordant counts
(`exact.bonett_price`, ci_method 'bonett_price'). Any other metric (the rescaled *_guess_adj
and *_chance_adj, the differences drop_* and delta_pr, shares) gets the percentile bootstrap on
the same item resamples as every rate (bootstrap_benchmarks, `bootstrap.draw_counts`; pooled
rows, dataset = lang = 'all', resample each benchmark separately), and a bootstrap difference
that is 0 on every item the exact bound of 25_rates.sql instead of the bootstrap's point.
"""

from __future__ import annotations

import re

import duckdb
import numpy as np
import polars as pl

from benchmark_illusion.metrics import exact
from benchmark_illusion.metrics.bootstrap import benchmark_counts, replicate_intervals

CHECKPOINT_KEYS = ("method", "structure", "sparsity")
# metrics that are never a proportion, whatever their values: the rescaled ones and the paired
# differences (the regexps of 25_rates.sql)
NOT_PROPORTIONS = re.compile(r"guess_adj|chance_adj|(^|_)(drop|odrop|crec)_|delta_pr")


def parse_checkpoint(text: str) -> dict:
    """'method/structure/sparsity' (e.g. 'wanda/unstructured/0.5', 'gptq/int4-g128/0') -> the
    checkpoint's key columns; ValueError naming the expected form otherwise."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise ValueError(
            f"checkpoint {text!r}: expected method/structure/sparsity, e.g. wanda/unstructured/0.5 "
            "or gptq/int4-g128/0 (the summary's method, structure and sparsity columns)"
        )
    try:
        sparsity = float(parts[2])
    except ValueError:
        raise ValueError(f"checkpoint {text!r}: sparsity {parts[2]!r} is not a number") from None
    return {"method": parts[0], "structure": parts[1], "sparsity": sparsity}


def _values(con, model: str, metric: str, ckpt: dict) -> pl.DataFrame:
    return con.sql(
        """SELECT v.dataset, v.lang, v.item_id, u.idx::BIGINT AS idx, v.value
           FROM item_values v
           JOIN bootstrap_units u USING (population, model, dataset, lang, item_id)
           WHERE v.population = 'selected' AND v.model = ? AND v.metric = ?
             AND v.method = ? AND v.structure = ? AND v.sparsity = ?""",
        params=[model, metric, ckpt["method"], ckpt["structure"], ckpt["sparsity"]],
    ).pl()


def paired_difference(
    con: duckdb.DuckDBPyConnection,
    model: str,
    metric: str,
    a: dict,
    b: dict,
    ci_level: float = 0.95,
) -> pl.DataFrame:
    """Per benchmark and pooled: n_items (items with a value under both), the two rates on
    those items, difference = a - b and its paired interval (ci_low, ci_high, ci_method)."""
    va, vb = _values(con, model, metric, a), _values(con, model, metric, b)
    both = va.join(vb, on=["dataset", "lang", "item_id", "idx"], suffix="_b")
    probs = ((1 - ci_level) / 2, (1 + ci_level) / 2)
    proportions = not NOT_PROPORTIONS.search(metric) and bool(
        both["value"].is_in([0.0, 1.0]).all() and both["value_b"].is_in([0.0, 1.0]).all()
    )
    counts = benchmark_counts(con, "selected", model)
    rows, pooled_s, pooled_n, pooled_d = [], None, None, []
    for (dataset, lang), part in both.sort("dataset", "lang").group_by(
        ["dataset", "lang"], maintain_order=True
    ):
        w = counts[(dataset, lang)].astype(np.float64)
        diff = np.zeros(w.shape[1])
        has = np.zeros(w.shape[1])
        idx = part["idx"].to_numpy()
        d = (part["value"] - part["value_b"]).to_numpy()
        diff[idx], has[idx] = d, 1.0
        sums, dens = (w @ diff)[:, None], (w @ has)[:, None]
        pooled_s = sums if pooled_s is None else pooled_s + sums
        pooled_n = dens if pooled_n is None else pooled_n + dens
        pooled_d.append(part)
        rows.append(_row(dataset, lang, part, sums, dens, probs, ci_level, proportions))
    if pooled_d:
        rows.append(
            _row(
                "all", "all", pl.concat(pooled_d), pooled_s, pooled_n, probs, ci_level, proportions
            )
        )
    return pl.DataFrame(
        rows,
        schema={
            "dataset": pl.String,
            "lang": pl.String,
            "n_items": pl.Int64,
            "a": pl.Float64,
            "b": pl.Float64,
            "difference": pl.Float64,
            "ci_low": pl.Float64,
            "ci_high": pl.Float64,
            "ci_method": pl.String,
        },
        orient="row",
    )


def _row(dataset, lang, part, sums, dens, probs, ci_level, proportions) -> tuple:
    d = (part["value"] - part["value_b"]).to_numpy()
    n = len(d)
    if n and proportions:
        lo, hi = exact.bonett_price(int((d == 1).sum()), int((d == -1).sum()), n, ci_level)
        method = "bonett_price"
    elif n and not d.any():
        bound = 1 - ((1 - ci_level) / 2) ** (1 / n)
        lo, hi, method = -bound, bound, "exact"
    else:
        _, lo, hi = replicate_intervals(sums, dens, probs)
        lo, hi, method = float(lo[0]), float(hi[0]), "bootstrap"
    return (
        dataset,
        lang,
        n,
        float(part["value"].mean()),
        float(part["value_b"].mean()),
        float(d.mean()),
        lo,
        hi,
        method,
    )
