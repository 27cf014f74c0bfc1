"""The concept figures of the competency-gap tables (workflow/sql/concepts/, docs/concepts.md):
benchmark coverage of the concepts, the top and bottom concepts, and the concepts pruning
damages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from benchmark_illusion.metrics.figures.common import (
    empty_panel,
    label_unstructured,
    method_panels,
    panel_grid,
    save_figure,
)


def _concept_name(row: dict, width: int = 34) -> str:
    label = row.get("label") or "(never fires)"
    text = f"#{row['concept']} {label}"
    return text if len(text) <= width else text[: width - 1] + "…"


def _bars(ax, df: pl.DataFrame, value: str, title: str, xlabel: str, color: str) -> None:
    if df.height == 0:
        empty_panel(ax, "no concept with enough support")
        ax.set_title(title, fontsize=10)
        return
    rows = df.to_dicts()
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r[value] for r in rows], color=color, alpha=0.8)
    # the value at the bar's end, so a 0 reads as 0 and not as missing
    for v, r in zip(y, rows, strict=True):
        ax.annotate(
            f"{r[value]:.3g}",
            (r[value], v),
            xytext=(2, -3),
            textcoords="offset points",
            fontsize=6,
            color="0.2",
        )
    ax.set_yticks(y)
    ax.set_yticklabels([_concept_name(r) for r in rows], fontsize=7)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="x")


def concept_coverage(con, path: Path) -> None:
    """Distribution of chi_bench over the active concepts, per benchmark and across (log x)."""
    df = con.sql("SELECT * FROM chi_bench").pl()
    models = sorted(df["model"].unique().to_list())
    fig, axes = panel_grid(len(models), 1, width=8.0, height=3.8)
    for r, model in enumerate(models):
        ax = axes[r][0]
        d = df.filter(pl.col("model") == model)
        active = d.filter((pl.col("n_active") > 0) & (pl.col("chi_bench") > 0))
        if active.height == 0:
            empty_panel(ax, f"{model}: no active concept")
            continue
        lo, hi = float(active["chi_bench"].min()), float(active["chi_bench"].max())
        bins = np.logspace(np.log10(lo) - 0.05, np.log10(hi) + 0.05, 40)
        benchmarks = (
            d.filter(pl.col("lang") != "all")
            .select("dataset", "lang")
            .unique()
            .sort("dataset", "lang")
        )
        for i, (dataset, lang) in enumerate(benchmarks.iter_rows()):
            b = d.filter((pl.col("dataset") == dataset) & (pl.col("lang") == lang))
            missing = int((b["n_active"] == 0).sum())
            vals = b.filter(pl.col("n_active") > 0)["chi_bench"].to_numpy()
            ax.hist(
                vals[vals > 0],
                bins=bins,
                histtype="step",
                color=f"C{i % 10}",
                alpha=0.8,
                label=f"{dataset}/{lang} (missing: {missing})",
            )
        a = d.filter(pl.col("lang") == "all")
        vals = a.filter(pl.col("n_active") > 0)["chi_bench"].to_numpy()
        ax.hist(
            vals[vals > 0],
            bins=bins,
            histtype="step",
            color="k",
            linewidth=2,
            label=f"across benchmarks (missing: {int((a['n_active'] == 0).sum())})",
        )
        for col, style in (
            ("under_threshold", "under-represented below"),
            ("over_threshold", "over-represented above"),
        ):
            t = a[col].drop_nulls()
            if len(t):
                ax.axvline(float(t[0]), color="0.4", linestyle="--", linewidth=1)
                ax.annotate(
                    f"{style}\n{float(t[0]):.2f}",
                    (float(t[0]), 1),
                    xycoords=("data", "axes fraction"),
                    xytext=(3, -22),
                    textcoords="offset points",
                    fontsize=7,
                    color="0.3",
                )
        ax.set_xscale("log")
        ax.set_xlabel(
            "chi_bench (benchmark coverage of the concept; 1 = an average concept; log scale)"
        )
        ax.set_ylabel("concepts")
        ax.set_title(f"{model}: {len(a)} SAE concepts", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(
        "How well the benchmarks cover each concept (chi_bench distribution over active concepts)",
        fontsize=12,
    )
    save_figure(fig, path)


def concept_extremes(con, path: Path) -> None:
    """Top and bottom concepts by chi_bench (across benchmarks) and by the dense model's
    chi_model."""
    bench = con.sql("SELECT * FROM chi_bench WHERE dataset = 'all' AND n_active > 0").pl()
    model_df = con.sql("""SELECT * FROM chi_model WHERE dataset = 'all' AND method = 'dense'
        AND format = 'open'
                          AND supported AND population = 'pool'""").pl()
    models = sorted(bench["model"].unique().to_list())
    fig, axes = panel_grid(len(models), 4, width=4.6, height=4.2)
    n = 10
    for r, model in enumerate(models):
        b = bench.filter(pl.col("model") == model)
        m = model_df.filter(pl.col("model") == model)
        dense = "chi_model (open, dense, pool items)"
        panels = (  # (rows, column, highest first, title, x label, colour), one per column
            (b, "chi_bench", True, "best covered", "chi_bench (across benchmarks)", "tab:green"),
            (
                b,
                "chi_bench",
                False,
                "least covered (active)",
                "chi_bench (across benchmarks)",
                "tab:red",
            ),
            (m, "chi_model", True, "dense model strongest", dense, "tab:blue"),
            (m, "chi_model", False, "dense model weakest (gaps)", dense, "tab:orange"),
        )
        for ax, (df, col, top, title, xlabel, color) in zip(axes[r], panels, strict=True):
            rows = df.sort([col, "concept"], descending=[top, False]).head(n)
            _bars(ax, rows, col, f"{model}: {title}", xlabel, color)
        for ax in axes[r][2:]:
            ax.set_xlim(0, 1.12)  # room for the value printed after a bar at 1
    fig.suptitle(
        "Top and bottom concepts: benchmark coverage (chi_bench) "
        "and dense-model performance (chi_model)",
        fontsize=12,
    )
    save_figure(fig, path)


NO_SIGNIFICANT_DAMAGE = "no concept is significantly damaged"


def concept_damage(con, path: Path) -> None:
    """Per method: the concepts pruning damages beyond their languages
    (concept_damage.significant_open)."""
    save_figure(_concept_damage_figure(con), path)


def _concept_damage_figure(con):
    """One panel per model x method: the concepts significantly damaged in open at one of the
    method's checkpoints (BH q < fdr_q and a drop above its languages' drop, across benchmarks),
    each shown at the checkpoint where its excess is largest, most excess first. Bars: the open
    drop with its bootstrap interval (red) next to the mc drop (blue); the black tick is the drop
    the concept's languages predict. Panels without such a concept say so."""
    fdr_q, ci_level = con.execute("SELECT fdr_q, ci_level FROM report_damage_criteria").fetchall()[
        0
    ]
    best = con.sql("""SELECT * FROM report_damaged_concepts WHERE method_peak
                      ORDER BY excess_open DESC, q_open, sparsity, structure, concept""").pl()
    methods = con.sql("SELECT DISTINCT model, method FROM concept_damage").pl()
    models = sorted(con.sql("SELECT DISTINCT model FROM chi_bench").pl()["model"].to_list())
    fig, _, panels = method_panels(methods, models, "no pruned checkpoint")
    n = 12
    for ax, model, method, _d in panels:
        m = best.filter((pl.col("model") == model) & (pl.col("method") == method)).head(n)
        ax.set_title(f"{model}: {method}", fontsize=10)
        if m.height == 0:
            empty_panel(ax, NO_SIGNIFICANT_DAMAGE)
            continue
        rows = m.to_dicts()
        y = list(range(len(rows)))[::-1]
        drop = [r["drop_open"] for r in rows]
        low = [
            r["drop_open"] if r["drop_open_ci_low"] is None else r["drop_open_ci_low"] for r in rows
        ]
        high = [
            r["drop_open"] if r["drop_open_ci_high"] is None else r["drop_open_ci_high"]
            for r in rows
        ]
        err = [
            [max(v - lo, 0) for v, lo in zip(drop, low, strict=True)],
            [max(hi - v, 0) for v, hi in zip(drop, high, strict=True)],
        ]
        ax.barh(
            [v + 0.2 for v in y],
            drop,
            height=0.4,
            color="tab:red",
            xerr=err,
            capsize=2,
            error_kw={"elinewidth": 0.8},
            label="open",
        )
        ax.barh(
            [v - 0.2 for v in y],
            [r["drop_mc"] or 0.0 for r in rows],
            height=0.4,
            color="tab:blue",
            label="mc",
        )
        ax.scatter(
            [r["expected_drop_open"] for r in rows],
            [v + 0.2 for v in y],
            marker="|",
            s=120,
            color="k",
            zorder=3,
            label="its languages' drop",
        )
        ax.set_yticks(y)
        ax.set_yticklabels(
            [
                f"{_concept_name(r, 26)}  s{r['sparsity']:g}{label_unstructured(r['structure'])} "
                f"q{r['q_open']:.2g}"
                for r in rows
            ],
            fontsize=7,
        )
        ax.set_xlim(min(0.0, float(m["drop_mc"].min() or 0)) - 0.02, 1.05)
        ax.set_xlabel("chi_model drop, dense - pruned (across benchmarks)")
        ax.grid(alpha=0.3, axis="x")
        ax.legend(fontsize=6, loc="best", framealpha=0.8)
    if best.height == 0:
        fig.suptitle(
            f"Pruning damage by concept: {NO_SIGNIFICANT_DAMAGE}\n"
            f"(open: BH q < {fdr_q:g} and a drop above its languages' drop)",
            fontsize=10,
        )
    else:
        fig.suptitle(
            "Concepts pruning damages beyond their languages "
            f"(open: BH q < {fdr_q:g}, drop above its languages' drop)\n"
            f"open drop with {ci_level:.0%} interval (red), mc drop (blue), "
            "| = the drop its languages predict",
            fontsize=10,
        )
    return fig
