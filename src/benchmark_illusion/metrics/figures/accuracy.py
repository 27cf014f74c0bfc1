"""The accuracy and MC-only figures: accuracy and MC-only rate against sparsity, the MC-only
rate by language and split by status, and pruning and quantization against stored bits per
weight."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from benchmark_illusion.metrics.figures.common import (
    FORMATS,
    SPARSITY_LABEL,
    empty_panel,
    errorbar,
    label_panel,
    label_unstructured,
    method_color,
    method_panels,
    panel_grid,
    pruning_methods,
    save_figure,
    shared_legend,
)


def accuracy_vs_sparsity(con, path: Path) -> None:
    """Accuracy on the selected items per format, against sparsity, one line per method."""
    df = con.sql(
        "SELECT * FROM accuracy WHERE dataset = 'all' AND format IN ('open', 'candidates', 'mc')"
    ).pl()
    models = sorted(df["model"].unique().to_list())
    fig, axes = panel_grid(len(models), len(FORMATS))
    for r, model in enumerate(models):
        d = df.filter(pl.col("model") == model)
        dense = d.filter(pl.col("method") == "dense")
        n = int(dense["n_items"].max() or 0) if dense.height else int(d["n_items"].max() or 0)
        for c, (fmt, title) in enumerate(FORMATS.items()):
            ax = axes[r][c]
            f = d.filter(pl.col("format") == fmt)
            if f.height == 0:
                empty_panel(ax, f"format {fmt} not evaluated")
                continue
            base = f.filter(pl.col("method") == "dense")
            for i, method in enumerate(pruning_methods(f)):
                for structure in sorted(
                    f.filter(pl.col("method") == method)["structure"].unique().to_list()
                ):
                    m = f.filter((pl.col("method") == method) & (pl.col("structure") == structure))
                    if structure == "unstructured":
                        errorbar(
                            ax,
                            pl.concat([base, m]),
                            "sparsity",
                            "accuracy",
                            "ci_low",
                            "ci_high",
                            marker="o",
                            color=method_color(method, i),
                            label=method,
                        )
                    else:
                        errorbar(
                            ax,
                            m,
                            "sparsity",
                            "accuracy",
                            "ci_low",
                            "ci_high",
                            marker="s",
                            linestyle="none",
                            markerfacecolor="none",
                            color=method_color(method, i),
                            label=f"{method} {structure}",
                        )
            if base.height and not pruning_methods(f):
                errorbar(
                    ax,
                    base,
                    "sparsity",
                    "accuracy",
                    "ci_low",
                    "ci_high",
                    marker="o",
                    color="k",
                    label="dense",
                )
            ax.set_ylim(-0.03, 1.03)
            ax.set_xlabel(SPARSITY_LABEL)
            ax.set_ylabel("accuracy on selected items")
            ax.set_title(f"{model}: {title}", fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, title=f"n = {n} items", title_fontsize=8)
    fig.suptitle(
        "Accuracy vs sparsity by format (all languages pooled; 95% bootstrap intervals)",
        fontsize=12,
        y=1.02,
    )
    save_figure(fig, path)


def mc_only_by_language(con, path: Path) -> None:
    """MC-only rate per benchmark (dataset/language) against sparsity, one panel per method."""
    df = con.sql("SELECT * FROM mc_only").pl()
    models = sorted(df["model"].unique().to_list())
    fig, _, panels = method_panels(df, models, "no pruned checkpoint")
    for ax, model, method, d in panels:
        dense = d.filter(pl.col("method") == "dense")
        m = pl.concat(
            [
                dense,
                d.filter((pl.col("method") == method) & (pl.col("structure") == "unstructured")),
            ]
        )
        benchmarks = (
            m.filter(pl.col("lang") != "all")
            .select("dataset", "lang")
            .unique()
            .sort("dataset", "lang")
        )
        for i, (dataset, lang) in enumerate(benchmarks.iter_rows()):
            b = m.filter((pl.col("dataset") == dataset) & (pl.col("lang") == lang)).sort("sparsity")
            n = int(b["n_items"].max())
            ax.plot(
                b["sparsity"].to_list(),
                b["mc_only_rate"].to_list(),
                marker="o",
                alpha=0.8,
                color=f"C{i % 10}",
                label=f"{dataset}/{lang} (n={n})",
            )
        pooled = m.filter(pl.col("lang") == "all")
        errorbar(
            ax,
            pooled,
            "sparsity",
            "mc_only_rate",
            "mc_only_ci_low",
            "mc_only_ci_high",
            color="k",
            linewidth=2.2,
            marker="D",
            label=f"all pooled (n={int(pooled['n_items'].max())})",
        )
        floor = pooled.filter(pl.col("method") == method)
        if "perturbation_floor" in floor.columns and floor["perturbation_floor"].drop_nulls().len():
            floor = floor.filter(pl.col("perturbation_floor").is_not_null())
            errorbar(
                ax,
                floor,
                "sparsity",
                "perturbation_floor",
                "perturbation_floor_ci_low",
                "perturbation_floor_ci_high",
                color="0.45",
                linestyle="--",
                marker="x",
                label="perturbation floor, pooled (noise of the same size)",
            )
        nm_pooled = d.filter(
            (pl.col("method") == method)
            & (pl.col("structure") != "unstructured")
            & (pl.col("lang") == "all")
        )
        for row in nm_pooled.iter_rows(named=True):
            ax.errorbar(
                [row["sparsity"]],
                [row["mc_only_rate"]],
                yerr=[
                    [row["mc_only_rate"] - row["mc_only_ci_low"]],
                    [row["mc_only_ci_high"] - row["mc_only_rate"]],
                ],
                marker="s",
                markerfacecolor="none",
                color="k",
                capsize=3,
                label=f"all pooled, {row['structure']}",
            )
        label_panel(
            ax, model, method, SPARSITY_LABEL, "MC-only rate (mc right, open wrong)", (-0.03, 1.03)
        )
        ax.legend(fontsize=7)
    fig.suptitle(
        "MC-only rate by language and sparsity "
        "(share of selected items recognised but not produced)",
        fontsize=12,
    )
    save_figure(fig, path)


MC_ONLY_STATUSES = {
    "verbose": ("verbose: the gold stated in a sentence", "tab:gray"),
    "demoted": ("demoted: a recovery decode produces it", "tab:blue"),
    "erased": ("erased: decoded, never produced", "tab:red"),
    "untested": ("untested: no decode ran", "white"),
}


def mc_only_split(con, path: Path) -> None:
    """The pooled MC-only rate of every pruned checkpoint split by status (verbose, demoted,
    erased, untested; the four sum to the strict MC-only rate), with the sentence-tolerant
    MC-only rate and its interval beside the bars."""
    df = con.sql("SELECT * FROM mc_only WHERE lang = 'all'").pl()
    models = sorted(df["model"].unique().to_list())
    fig, _, panels = method_panels(df, models, "no pruned checkpoint")
    for ax, model, method, d in panels:
        m = d.filter(pl.col("method") == method).sort("structure", "sparsity")
        labels = [
            f"{r['sparsity']:g}{label_unstructured(r['structure'])}"
            for r in m.iter_rows(named=True)
        ]
        x = list(range(m.height))
        bottom = [0.0] * m.height
        for status, (label, color) in MC_ONLY_STATUSES.items():
            h = [v or 0.0 for v in m[f"mc_only_{status}_rate"].to_list()]
            ax.bar(x, h, bottom=bottom, color=color, edgecolor="k", linewidth=0.6, label=label)
            bottom = [b + v for b, v in zip(bottom, h, strict=True)]
        sent = m.with_row_index("pos").filter(pl.col("mc_only_sentence_rate").is_not_null())
        errorbar(
            ax,
            sent,
            "pos",
            "mc_only_sentence_rate",
            "mc_only_sentence_ci_low",
            "mc_only_sentence_ci_high",
            fmt="D",
            color="k",
            label="sentence-tolerant MC-only rate (95% CI)",
        )
        ax.set_xticks(x, labels)
        label_panel(ax, model, method, "sparsity", "share of selected items", (0, 1.03))
    shared_legend(fig, fig.axes, ncol=3, fontsize=8)
    fig.suptitle(
        "MC-only items by what became of the open answer (bars sum to the strict MC-only rate)",
        fontsize=12,
    )
    save_figure(fig, path)


SIZE_LABEL = "stored size relative to dense (16-bit = 1)"
SIZE_TITLE = (
    "Pruning and quantization at matched size: accuracy and MC-only rate against each "
    "checkpoint's stored size relative to the dense model,\nall at 16 bits per weight before "
    "compression (dense = 1; all languages pooled; 95% bootstrap intervals)"
)


def source_note(d: pl.DataFrame) -> str | None:
    """What a model's source stores when it is not 16-bit weights (a GGUF's quantization): its
    sizes are not on the axis, which starts from the pipeline's 16-bit import."""
    src = d.filter(pl.col("source_bits_per_weight").is_not_null())
    if src.height == 0:
        return None
    r = src.row(0, named=True)
    return (
        f"source file: {r['source_weight_type']}, {r['source_bits_per_weight']:g} bits per "
        "weight, not on this axis"
    )


def accuracy_vs_size(con, path: Path) -> None:
    """Pruning and quantization on one axis: accuracy per format and the MC-only rate against
    each checkpoint's stored size relative to the dense model (`checkpoints.relative_size`: its
    storage-model bits per weight over the dense model's 16; dense 1, whatever the source's own
    precision, which a panel notes when it is not 16-bit), one line per method and structure
    kind (unstructured, each N:M, each quantization grid shape; a variant made elsewhere is a
    point of its own), so checkpoints of matched size stand one above the other."""
    cols = (
        "c.relative_size, c.family, c.group_size, c.symmetric_grid, c.source_weight_type, "
        "c.source_bits_per_weight"
    )
    acc = con.sql(
        "SELECT a.model, a.method, a.structure, a.sparsity, a.format, a.accuracy AS value, "
        f"a.ci_low, a.ci_high, {cols} "
        "FROM accuracy a JOIN checkpoints c USING (model, method, structure, sparsity) "
        "WHERE a.dataset = 'all' AND a.format IN ('open', 'candidates', 'mc') "
        "AND c.family NOT IN ('perturbation', 'control')"
    ).pl()
    mc_only = con.sql(
        "SELECT m.model, m.method, m.structure, m.sparsity, 'mc_only' AS format, "
        "m.mc_only_rate AS value, m.mc_only_ci_low AS ci_low, m.mc_only_ci_high AS ci_high, "
        f"{cols} "
        "FROM mc_only m JOIN checkpoints c USING (model, method, structure, sparsity) "
        "WHERE m.dataset = 'all' AND c.family NOT IN ('perturbation', 'control')"
    ).pl()
    df = pl.concat([acc, mc_only], how="vertical_relaxed")
    panels = {**FORMATS, "mc_only": "MC-only rate (mc right, open wrong)"}
    models = sorted(df["model"].unique().to_list()) or ["(no checkpoints)"]
    fig, axes = panel_grid(len(models), len(panels))

    def kind(row: dict) -> str:
        if row["family"] == "quantization":
            return row["structure"].split("-", 1)[1]  # the grid shape: g128, pc, g64-sym
        return "" if row["structure"] == "unstructured" else row["structure"]

    df = df.with_columns(
        pl.struct("family", "structure").map_elements(kind, return_dtype=pl.Utf8).alias("kind")
    )
    for r, model in enumerate(models):
        d = df.filter(pl.col("model") == model)
        note = source_note(d) if d.height else None
        for c, (fmt, title) in enumerate(panels.items()):
            ax = axes[r][c]
            f = d.filter(pl.col("format") == fmt)
            if f.height == 0:
                empty_panel(ax, f"{fmt} not evaluated" if fmt != "mc_only" else "no MC-only table")
                continue
            dense = f.filter(pl.col("family") == "dense")
            lines = f.filter(pl.col("family") != "dense").select("method", "kind", "family")
            for i, (method, k, family) in enumerate(sorted(lines.unique().iter_rows())):
                m = f.filter((pl.col("method") == method) & (pl.col("kind") == k))
                nm = family == "pruning" and k != ""
                # an N:M checkpoint or a variant made elsewhere: a point of its own, no line
                alone = nm or family == "variant"
                errorbar(
                    ax,
                    (m if alone else pl.concat([dense, m])).sort("relative_size"),
                    "relative_size",
                    "value",
                    "ci_low",
                    "ci_high",
                    marker={"quantization": "D", "pruning": "s" if nm else "o", "variant": "^"}[
                        family
                    ],
                    linestyle="none" if alone else "-",
                    markerfacecolor="none" if nm else None,
                    color=method_color(method, i),
                    label=f"{method} {k}".strip(),
                )
            if dense.height:
                ax.plot(dense["relative_size"], dense["value"], "k*", markersize=10, label="dense")
            ax.invert_xaxis()  # more compression to the right
            xlabel = f"{SIZE_LABEL}\n{note}" if note else SIZE_LABEL
            label_panel(ax, model, title, xlabel, "rate on selected items", (-0.03, 1.03))
            ax.legend(fontsize=7)
    fig.suptitle(SIZE_TITLE, fontsize=12, y=1.04)
    save_figure(fig, path)
