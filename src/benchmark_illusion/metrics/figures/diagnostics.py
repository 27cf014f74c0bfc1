"""The figures of what lies behind an MC-only item: the gold first-token rank, recovery by
decode, greedy vs oracle accuracy and the position of the chosen option."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: select the backend before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from benchmark_illusion.compression.names import is_control  # noqa: E402
from benchmark_illusion.metrics.figures.common import (  # noqa: E402
    DECODES,
    FORMATS,
    SPARSITY_LABEL,
    empty_panel,
    errorbar,
    label_panel,
    label_unstructured,
    method_panels,
    panel_grid,
    save_figure,
    shared_legend,
)


def gold_rank_cdf(con, path: Path) -> None:
    """CDF of the gold first-token rank of MC-only items, pruned vs dense on the same items."""
    df = con.sql("SELECT * FROM gold_rank_cdf WHERE dataset = 'all'").pl()
    models = sorted(con.sql("SELECT DISTINCT model FROM item_outcomes").pl()["model"].to_list())
    fig, _, panels = method_panels(df, models, "no MC-only items at any sparsity")
    for ax, model, method, d in panels:
        ckpts = (
            d.filter(pl.col("method") == method)
            .select("structure", "sparsity")
            .unique()
            .sort("structure", "sparsity")
        )
        cmap = plt.get_cmap("viridis")
        for i, (structure, sparsity) in enumerate(ckpts.iter_rows()):
            color = cmap(i / max(len(ckpts) - 1, 1) * 0.85)
            for series, style in (("pruned", "-"), ("dense", ":")):
                s = d.filter(
                    (pl.col("method") == method)
                    & (pl.col("structure") == structure)
                    & (pl.col("sparsity") == sparsity)
                    & (pl.col("series") == series)
                ).sort("gold_rank")
                if s.height == 0:
                    continue
                x = [1] + s["gold_rank"].to_list()
                y = [0.0] + s["cdf"].to_list()
                if x[1] == 1:
                    x, y = x[1:], y[1:]
                label = (
                    f"{sparsity:g}{label_unstructured(structure)} pruned (n={int(s['n_items'][0])})"
                    if series == "pruned"
                    else f"{sparsity:g}{label_unstructured(structure)} dense, same items"
                )
                ax.step(
                    x, y, where="post", linestyle=style, color=color, label=label, linewidth=1.6
                )
        ax.set_xscale("log")
        label_panel(
            ax,
            model,
            method,
            "gold first-token rank (1 = most likely; log scale)",
            "share of MC-only items with rank <= x",
            (0, 1.02),
            grid="both",
        )
        ax.legend(fontsize=7)
    fig.suptitle(
        "Gold first-token rank of MC-only items: pruned checkpoint (solid) vs dense model (dotted)",
        fontsize=12,
    )
    save_figure(fig, path)


def recovery_by_decode(con, path: Path) -> None:
    """Share of MC-only items each recovery decode recovers, against sparsity."""
    df = con.sql("SELECT * FROM recovery WHERE dataset = 'all'").pl()
    models = sorted(con.sql("SELECT DISTINCT model FROM item_outcomes").pl()["model"].to_list())
    fig, axes, panels = method_panels(df, models, "no MC-only items, or recovery decodes off")
    for ax, model, method, d in panels:
        m = d.filter(pl.col("method") == method)
        decodes = [k for k in DECODES if k in set(m["decode"].to_list())]
        offsets = {k: (i - (len(decodes) - 1) / 2) * 0.006 for i, k in enumerate(decodes)}
        for i, decode in enumerate(decodes):
            s = m.filter((pl.col("decode") == decode) & (pl.col("structure") == "unstructured"))
            s = s.with_columns(pl.col("sparsity") + offsets[decode])
            style = (
                dict(color="k", linewidth=2.2, marker="D")
                if decode == "oracle"
                else dict(color=f"C{i}", marker="o")
            )
            if s.height:
                errorbar(
                    ax, s, "sparsity", "rate", "ci_low", "ci_high", label=DECODES[decode], **style
                )
            if decode == "oracle" and s.height and s["false_recovery_rate"].is_not_null().any():
                f = s.filter(pl.col("false_recovery_rate").is_not_null())
                errorbar(
                    ax,
                    f,
                    "sparsity",
                    "false_recovery_rate",
                    "false_ci_low",
                    "false_ci_high",
                    color="0.5",
                    linestyle="--",
                    marker="x",
                    label="any decode, judged against a distractor (false recovery)",
                )
        counts = (
            m.filter(pl.col("decode") == decodes[0]).sort("structure", "sparsity") if decodes else m
        )
        for row in counts.iter_rows(named=True):
            ax.annotate(
                f"n={row['n_mc_only']}",
                (row["sparsity"], 1.0),
                textcoords="offset points",
                xytext=(0, 4),
                ha="center",
                fontsize=7,
                color="0.3",
            )
        label_panel(
            ax, model, method, SPARSITY_LABEL, "share of MC-only items recovered", (-0.03, 1.1)
        )
    shared_legend(
        fig, axes.flat, ncol=6, fontsize=9, title="decode (error bars: 95% bootstrap intervals)"
    )
    fig.suptitle(
        "Recovery of MC-only items by decode "
        "(demoted if any decode recovers them; n = MC-only items)",
        fontsize=12,
    )
    save_figure(fig, path)


def oracle_vs_sparsity(con, path: Path) -> None:
    """Greedy vs oracle accuracy over every selected item, against sparsity (the view of Wen et
    al., arXiv:2606.17609)."""
    df = con.sql(
        "SELECT * FROM oracle WHERE dataset = 'all' AND decode IN ('greedy', 'oracle') "
        "AND structure IN ('none', 'unstructured')"
    ).pl()
    complete = (
        df.filter(pl.col("decode") == "oracle")["complete"].fill_null(False).any()
        if df.height
        else False
    )
    models = sorted(con.sql("SELECT DISTINCT model FROM item_outcomes").pl()["model"].to_list())
    empty = "no pruned checkpoint" if complete else "oracle needs evaluation.recovery.scope: all"
    fig, axes, panels = method_panels(df if complete else df.clear(), models, empty)
    for ax, model, method, d in panels:
        rows = d.filter(pl.col("method").is_in(["dense", method]) & pl.col("complete"))
        for decode, style in (
            ("greedy", dict(color="tab:red", marker="o", label="greedy")),
            ("oracle", dict(color="k", marker="D", linewidth=2.2, label="oracle (any decode)")),
        ):
            errorbar(
                ax,
                rows.filter(pl.col("decode") == decode),
                "sparsity",
                "accuracy",
                "ci_low",
                "ci_high",
                **style,
            )
        n = int(rows["n_items"].max() or 0) if rows.height else 0
        label_panel(
            ax, model, method, SPARSITY_LABEL, "accuracy on all selected items", (-0.03, 1.03)
        )
        ax.legend(fontsize=8, title=f"n = {n} items", title_fontsize=8)
    fig.suptitle(
        "Greedy vs oracle accuracy over all selected items "
        "(95% bootstrap intervals; table: oracle)",
        fontsize=12,
    )
    save_figure(fig, path)


def _checkpoint_label(row: dict) -> str:
    if row["method"] == "dense":
        return "dense"
    if row.get("bits") is not None:
        return f"{row['method']} {row['structure']}"
    return f"{row['method']}{label_unstructured(row['structure'])} {row['sparsity']:.2f}"


def position_bias(con, path: Path) -> None:
    """Share of items whose chosen option sits at each position, per checkpoint, candidates and
    mc."""
    df = con.sql("SELECT * FROM position_bias WHERE dataset = 'all'").pl()
    # the perturbed twins are controls of the MC-only rate and the drops, not checkpoints to show
    df = df.filter(
        pl.col("method").map_elements(lambda m: not is_control(m), return_dtype=pl.Boolean)
    )
    models = sorted(con.sql("SELECT DISTINCT model FROM item_outcomes").pl()["model"].to_list())
    fig, axes = panel_grid(
        len(models),
        2,
        width=5.2,
        height=max(3.0, 0.32 * df.select("method", "structure", "sparsity").n_unique() * 4),
    )
    for r, model in enumerate(models):
        for c, fmt in enumerate(("candidates", "mc")):
            ax = axes[r][c]
            d = df.filter((pl.col("model") == model) & (pl.col("format") == fmt))
            if d.height == 0:
                empty_panel(ax, f"no {fmt} rows")
                continue
            # bits (NULL unless quantized) names a quantized checkpoint by its grid alone
            keys = ["method", "structure", "sparsity"] + (["bits"] if "bits" in d.columns else [])
            ckpts = (
                d.select(keys)
                .unique()
                .sort(pl.col("method") != "dense", "method", "structure", "sparsity")
            )
            positions = sorted(set(d["position"].to_list()), key=lambda p: (p == "none", p))
            grid = [[0.0] * len(positions) for _ in range(ckpts.height)]
            for row in d.iter_rows(named=True):
                i = next(
                    k
                    for k, ck in enumerate(ckpts.iter_rows(named=True))
                    if (ck["method"], ck["structure"], ck["sparsity"])
                    == (row["method"], row["structure"], row["sparsity"])
                )
                grid[i][positions.index(row["position"])] = row["share"]
            ax.imshow(grid, cmap="Blues", vmin=0, vmax=1, aspect="auto")
            for i, line in enumerate(grid):
                for j, v in enumerate(line):
                    ax.text(
                        j,
                        i,
                        f"{v:.2f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if v > 0.6 else "black",
                    )
            ax.set_xticks(range(len(positions)), positions)
            ax.set_yticks(
                range(ckpts.height),
                [_checkpoint_label(ck) for ck in ckpts.iter_rows(named=True)],
                fontsize=7,
            )
            uniform = d.filter(pl.col("position") != "none")["uniform"].max()
            ax.set_title(
                f"{model}: {FORMATS[fmt]}\n"
                f"(uniform = {uniform:.2f}; n = {d['n_items'].max()} items)",
                fontsize=9,
            )
            ax.set_xlabel(
                "option position chosen"
                + (" (none: no single option named)" if fmt == "candidates" else ""),
                fontsize=8,
            )
    fig.suptitle(
        "Position bias: share of items whose chosen option sits at each position", fontsize=12
    )
    save_figure(fig, path)
