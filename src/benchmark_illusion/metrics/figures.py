"""Figures of the metric tables in results/illusion.duckdb (PNG, one file per figure).

Every figure has one row of panels per model and uses the pooled rows of the tables
(dataset = 'all', lang = 'all') unless it is about languages. Error bars are the tables' 95%
bootstrap intervals. The captions shown in the Snakemake report live in workflow/report/.
"""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: select the backend before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from benchmark_illusion.compression.perturbation import parse_perturbed  # noqa: E402
from benchmark_illusion.io import atomic_path  # noqa: E402
from benchmark_illusion.metrics.aggregate import connect  # noqa: E402

log = logging.getLogger("benchmark_illusion")

FIGURES = (
    "accuracy_vs_sparsity",
    "mc_only_by_language",
    "mc_only_split",
    "gold_rank_cdf",
    "recovery_by_decode",
    "position_bias",
    "oracle_vs_sparsity",
    "accuracy_vs_size",
)
FORMATS = {
    "open": "open (generate)",
    "candidates": "candidates (options shown, generate)",
    "mc": "mc (log-likelihood)",
}
DECODES = {
    "beam_top": "beam, top beam",
    "beam_any": "beam, any beam",
    "sample_pass": "sampling, pass@k",
    "sample_majority": "sampling, majority vote",
    "oneshot": "one-shot greedy",
    "oracle": "any decode (oracle)",
}
METHOD_COLORS = {
    "magnitude": "tab:blue",
    "wanda": "tab:orange",
    "sparsegpt": "tab:green",
    "rtn": "tab:purple",
    "gptq": "tab:red",
}


def _color(method: str, i: int = 0) -> str:
    return METHOD_COLORS.get(method, f"C{3 + i}")


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, ".png") as tmp:
        fig.savefig(tmp, dpi=130, bbox_inches="tight", format="png")
    plt.close(fig)
    log.info("wrote %s", path)


def _grid(n_rows: int, n_cols: int, width: float = 4.2, height: float = 3.4):
    fig, axes = plt.subplots(
        max(n_rows, 1),
        max(n_cols, 1),
        figsize=(width * max(n_cols, 1), height * max(n_rows, 1)),
        squeeze=False,
    )
    return fig, axes


def _empty(ax, text: str) -> None:
    ax.text(
        0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="0.4"
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _errorbar(ax, df: pl.DataFrame, x: str, y: str, lo: str, hi: str, **kw) -> None:
    df = df.sort(x)
    yerr = [
        (df[y] - df[lo]).clip(lower_bound=0).to_list(),
        (df[hi] - df[y]).clip(lower_bound=0).to_list(),
    ]
    ax.errorbar(df[x].to_list(), df[y].to_list(), yerr=yerr, capsize=3, **kw)


def _methods(df: pl.DataFrame) -> list[str]:
    """The pruning methods of the rows (the sparsity figures' panels and lines): neither dense
    nor quantized (a `bits` value; quantized checkpoints are drawn by accuracy_vs_size) nor a
    perturbed twin (noise0-wanda: its rates are drawn as the perturbation floor, where a figure
    shows one, not as a method of their own)."""
    if "bits" in df.columns:
        df = df.filter(pl.col("bits").is_null())
    return sorted(
        m for m in df["method"].unique().to_list() if m != "dense" and parse_perturbed(m) is None
    )


def _label_unstructured(structure: str) -> str:
    return "" if structure == "unstructured" else f" {structure}"


def _method_panels(df: pl.DataFrame, models: list[str], empty: str):
    """A figure with one row per model and one panel per pruning method of that model.

    Returns (fig, axes, panels); panels yields (ax, model, method, the model's rows). A model
    without pruned rows gets `empty` in its first panel; panels a row does not use are hidden.
    """
    n_cols = max([len(_methods(df.filter(pl.col("model") == m))) for m in models] + [1])
    fig, axes = _grid(len(models), n_cols)

    def panels():
        for r, model in enumerate(models):
            d = df.filter(pl.col("model") == model)
            methods = _methods(d)
            if not methods:
                _empty(axes[r][0], f"{model}: {empty}")
            for c in range(max(len(methods), 1), n_cols):
                axes[r][c].set_visible(False)
            for c, method in enumerate(methods):
                yield axes[r][c], model, method, d

    return fig, axes, panels()


def _label(
    ax,
    model: str,
    method: str,
    xlabel: str,
    ylabel: str,
    ylim: tuple[float, float],
    grid: str = "major",
) -> None:
    ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{model}: {method}", fontsize=10)
    ax.grid(alpha=0.3, which=grid)


SPARSITY_LABEL = "sparsity (fraction of weights zeroed)"


def accuracy_vs_sparsity(con, path: Path) -> None:
    """Accuracy on the selected items per format, against sparsity, one line per method."""
    df = con.sql(
        "SELECT * FROM accuracy WHERE dataset = 'all' AND format IN ('open', 'candidates', 'mc')"
    ).pl()
    models = sorted(df["model"].unique().to_list())
    fig, axes = _grid(len(models), len(FORMATS))
    for r, model in enumerate(models):
        d = df.filter(pl.col("model") == model)
        dense = d.filter(pl.col("method") == "dense")
        n = int(dense["n_items"].max() or 0) if dense.height else int(d["n_items"].max() or 0)
        for c, (fmt, title) in enumerate(FORMATS.items()):
            ax = axes[r][c]
            f = d.filter(pl.col("format") == fmt)
            if f.height == 0:
                _empty(ax, f"format {fmt} not evaluated")
                continue
            base = f.filter(pl.col("method") == "dense")
            for i, method in enumerate(_methods(f)):
                for structure in sorted(
                    f.filter(pl.col("method") == method)["structure"].unique().to_list()
                ):
                    m = f.filter((pl.col("method") == method) & (pl.col("structure") == structure))
                    if structure == "unstructured":
                        _errorbar(
                            ax,
                            pl.concat([base, m]),
                            "sparsity",
                            "accuracy",
                            "ci_low",
                            "ci_high",
                            marker="o",
                            color=_color(method, i),
                            label=method,
                        )
                    else:
                        _errorbar(
                            ax,
                            m,
                            "sparsity",
                            "accuracy",
                            "ci_low",
                            "ci_high",
                            marker="s",
                            linestyle="none",
                            markerfacecolor="none",
                            color=_color(method, i),
                            label=f"{method} {structure}",
                        )
            if base.height and not _methods(f):
                _errorbar(
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
    _save(fig, path)


def mc_only_by_language(con, path: Path) -> None:
    """MC-only rate per benchmark (dataset/language) against sparsity, one panel per method."""
    df = con.sql("SELECT * FROM mc_only").pl()
    models = sorted(df["model"].unique().to_list())
    fig, _, panels = _method_panels(df, models, "no pruned checkpoint")
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
        _errorbar(
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
            _errorbar(
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
        _label(
            ax, model, method, SPARSITY_LABEL, "MC-only rate (mc right, open wrong)", (-0.03, 1.03)
        )
        ax.legend(fontsize=7)
    fig.suptitle(
        "MC-only rate by language and sparsity "
        "(share of selected items recognised but not produced)",
        fontsize=12,
    )
    _save(fig, path)


def _shared_legend(fig, axes, ncol: int, fontsize: int, title: str | None = None) -> None:
    """One legend under the figure with every label of `axes` once (at most ncol columns)."""
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles.keys()),
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=min(len(handles), ncol),
            fontsize=fontsize,
            title=title,
        )


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
    fig, _, panels = _method_panels(df, models, "no pruned checkpoint")
    for ax, model, method, d in panels:
        m = d.filter(pl.col("method") == method).sort("structure", "sparsity")
        labels = [
            f"{r['sparsity']:g}{_label_unstructured(r['structure'])}"
            for r in m.iter_rows(named=True)
        ]
        x = list(range(m.height))
        bottom = [0.0] * m.height
        for status, (label, color) in MC_ONLY_STATUSES.items():
            h = [v or 0.0 for v in m[f"mc_only_{status}_rate"].to_list()]
            ax.bar(x, h, bottom=bottom, color=color, edgecolor="k", linewidth=0.6, label=label)
            bottom = [b + v for b, v in zip(bottom, h, strict=True)]
        sent = m.with_row_index("pos").filter(pl.col("mc_only_sentence_rate").is_not_null())
        _errorbar(
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
        _label(ax, model, method, "sparsity", "share of selected items", (0, 1.03))
    _shared_legend(fig, fig.axes, ncol=3, fontsize=8)
    fig.suptitle(
        "MC-only items by what became of the open answer (bars sum to the strict MC-only rate)",
        fontsize=12,
    )
    _save(fig, path)


def gold_rank_cdf(con, path: Path) -> None:
    """CDF of the gold first-token rank of MC-only items, pruned vs dense on the same items."""
    df = con.sql("SELECT * FROM gold_rank_cdf WHERE dataset = 'all'").pl()
    models = sorted(con.sql("SELECT DISTINCT model FROM item_outcomes").pl()["model"].to_list())
    fig, _, panels = _method_panels(df, models, "no MC-only items at any sparsity")
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
                    f"{sparsity:g}{_label_unstructured(structure)} pruned "
                    f"(n={int(s['n_items'][0])})"
                    if series == "pruned"
                    else f"{sparsity:g}{_label_unstructured(structure)} dense, same items"
                )
                ax.step(
                    x, y, where="post", linestyle=style, color=color, label=label, linewidth=1.6
                )
        ax.set_xscale("log")
        _label(
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
    _save(fig, path)


def recovery_by_decode(con, path: Path) -> None:
    """Share of MC-only items each recovery decode recovers, against sparsity."""
    df = con.sql("SELECT * FROM recovery WHERE dataset = 'all'").pl()
    models = sorted(con.sql("SELECT DISTINCT model FROM item_outcomes").pl()["model"].to_list())
    fig, axes, panels = _method_panels(df, models, "no MC-only items, or recovery decodes off")
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
                _errorbar(
                    ax, s, "sparsity", "rate", "ci_low", "ci_high", label=DECODES[decode], **style
                )
            if decode == "oracle" and s.height and s["false_recovery_rate"].is_not_null().any():
                f = s.filter(pl.col("false_recovery_rate").is_not_null())
                _errorbar(
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
        _label(ax, model, method, SPARSITY_LABEL, "share of MC-only items recovered", (-0.03, 1.1))
    _shared_legend(
        fig, axes.flat, ncol=6, fontsize=9, title="decode (error bars: 95% bootstrap intervals)"
    )
    fig.suptitle(
        "Recovery of MC-only items by decode "
        "(demoted if any decode recovers them; n = MC-only items)",
        fontsize=12,
    )
    _save(fig, path)


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
    fig, axes, panels = _method_panels(df if complete else df.clear(), models, empty)
    for ax, model, method, d in panels:
        rows = d.filter(pl.col("method").is_in(["dense", method]) & pl.col("complete"))
        for decode, style in (
            ("greedy", dict(color="tab:red", marker="o", label="greedy")),
            ("oracle", dict(color="k", marker="D", linewidth=2.2, label="oracle (any decode)")),
        ):
            _errorbar(
                ax,
                rows.filter(pl.col("decode") == decode),
                "sparsity",
                "accuracy",
                "ci_low",
                "ci_high",
                **style,
            )
        n = int(rows["n_items"].max() or 0) if rows.height else 0
        _label(ax, model, method, SPARSITY_LABEL, "accuracy on all selected items", (-0.03, 1.03))
        ax.legend(fontsize=8, title=f"n = {n} items", title_fontsize=8)
    fig.suptitle(
        "Greedy vs oracle accuracy over all selected items "
        "(95% bootstrap intervals; table: oracle)",
        fontsize=12,
    )
    _save(fig, path)


def _checkpoint_label(row: dict) -> str:
    if row["method"] == "dense":
        return "dense"
    if row.get("bits") is not None:
        return f"{row['method']} {row['structure']}"
    return f"{row['method']}{_label_unstructured(row['structure'])} {row['sparsity']:.2f}"


def position_bias(con, path: Path) -> None:
    """Share of items whose chosen option sits at each position, per checkpoint, candidates and
    mc."""
    df = con.sql("SELECT * FROM position_bias WHERE dataset = 'all'").pl()
    # the perturbed twins are controls of the MC-only rate and the drops, not checkpoints to show
    df = df.filter(
        pl.col("method").map_elements(lambda m: parse_perturbed(m) is None, return_dtype=pl.Boolean)
    )
    models = sorted(con.sql("SELECT DISTINCT model FROM item_outcomes").pl()["model"].to_list())
    fig, axes = _grid(
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
                _empty(ax, f"no {fmt} rows")
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
    _save(fig, path)


SIZE_LABEL = "stored bits per weight (table checkpoints: weight_bits)"


def accuracy_vs_size(con, path: Path) -> None:
    """Pruning and quantization on one axis: accuracy per format and the MC-only rate against
    the stored bits per weight of the compressed layers (`checkpoints.weight_bits`; dense at its
    source's precision, 16 unless a GGUF source says otherwise),
    one line per method and structure kind (unstructured, each N:M, each quantization grid
    shape; a variant made elsewhere is a point of its own), so checkpoints of matched size stand
    one above the other."""
    acc = con.sql(
        "SELECT a.model, a.method, a.structure, a.sparsity, a.format, a.accuracy AS value, "
        "a.ci_low, a.ci_high, c.weight_bits, c.family, c.group_size, c.symmetric_grid "
        "FROM accuracy a JOIN checkpoints c USING (model, method, structure, sparsity) "
        "WHERE a.dataset = 'all' AND a.format IN ('open', 'candidates', 'mc') "
        "AND c.family <> 'perturbation'"
    ).pl()
    mc_only = con.sql(
        "SELECT m.model, m.method, m.structure, m.sparsity, 'mc_only' AS format, "
        "m.mc_only_rate AS value, m.mc_only_ci_low AS ci_low, m.mc_only_ci_high AS ci_high, "
        "c.weight_bits, c.family, c.group_size, c.symmetric_grid "
        "FROM mc_only m JOIN checkpoints c USING (model, method, structure, sparsity) "
        "WHERE m.dataset = 'all' AND c.family <> 'perturbation'"
    ).pl()
    df = pl.concat([acc, mc_only], how="vertical_relaxed")
    panels = {**FORMATS, "mc_only": "MC-only rate (mc right, open wrong)"}
    models = sorted(df["model"].unique().to_list()) or ["(no checkpoints)"]
    fig, axes = _grid(len(models), len(panels))

    def kind(row: dict) -> str:
        if row["family"] == "quantization":
            return row["structure"].split("-", 1)[1]  # the grid shape: g128, pc, g64-sym
        return "" if row["structure"] == "unstructured" else row["structure"]

    df = df.with_columns(
        pl.struct("family", "structure").map_elements(kind, return_dtype=pl.Utf8).alias("kind")
    )
    for r, model in enumerate(models):
        d = df.filter(pl.col("model") == model)
        for c, (fmt, title) in enumerate(panels.items()):
            ax = axes[r][c]
            f = d.filter(pl.col("format") == fmt)
            if f.height == 0:
                _empty(ax, f"{fmt} not evaluated" if fmt != "mc_only" else "no MC-only table")
                continue
            dense = f.filter(pl.col("family") == "dense")
            lines = f.filter(pl.col("family") != "dense").select("method", "kind", "family")
            for i, (method, k, family) in enumerate(sorted(lines.unique().iter_rows())):
                m = f.filter((pl.col("method") == method) & (pl.col("kind") == k))
                nm = family == "pruning" and k != ""
                # an N:M checkpoint or a variant made elsewhere: a point of its own, no line
                alone = nm or family == "variant"
                _errorbar(
                    ax,
                    (m if alone else pl.concat([dense, m])).sort("weight_bits"),
                    "weight_bits",
                    "value",
                    "ci_low",
                    "ci_high",
                    marker={"quantization": "D", "pruning": "s" if nm else "o", "variant": "^"}[
                        family
                    ],
                    linestyle="none" if alone else "-",
                    markerfacecolor="none" if nm else None,
                    color=_color(method, i),
                    label=f"{method} {k}".strip(),
                )
            if dense.height:
                ax.plot(dense["weight_bits"], dense["value"], "k*", markersize=10, label="dense")
            ax.invert_xaxis()  # more compression to the right
            _label(ax, model, title, SIZE_LABEL, "rate on selected items", (-0.03, 1.03))
            ax.legend(fontsize=7)
    fig.suptitle(
        "Pruning and quantization at matched size: accuracy and MC-only rate against stored "
        "bits per weight (all languages pooled; 95% bootstrap intervals)",
        fontsize=12,
        y=1.02,
    )
    _save(fig, path)


def make_figures(
    db_path: str | Path, out_dir: str | Path, names: tuple[str, ...] = FIGURES
) -> list[Path]:
    """Write the named figures (default: the metric figures; CONCEPT_FIGURES for the concept ones)
    into out_dir as {name}.png; return their paths."""
    con = connect(db_path)
    out = []
    try:
        for name in names:
            path = Path(out_dir) / f"{name}.png"
            globals()[name](con, path)
            out.append(path)
    finally:
        con.close()
    return out


# --------------------------------------------------------------------------------------------
# Concept figures (tables of workflow/sql/concepts/, docs/concepts.md)

CONCEPT_FIGURES = ("concept_coverage", "concept_extremes", "concept_damage")


def _concept_name(row: dict, width: int = 34) -> str:
    label = row.get("label") or "(never fires)"
    text = f"#{row['concept']} {label}"
    return text if len(text) <= width else text[: width - 1] + "…"


def _bars(ax, df: pl.DataFrame, value: str, title: str, xlabel: str, color: str) -> None:
    if df.height == 0:
        _empty(ax, "no concept with enough support")
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
    fig, axes = _grid(len(models), 1, width=8.0, height=3.8)
    for r, model in enumerate(models):
        ax = axes[r][0]
        d = df.filter(pl.col("model") == model)
        active = d.filter((pl.col("n_active") > 0) & (pl.col("chi_bench") > 0))
        if active.height == 0:
            _empty(ax, f"{model}: no active concept")
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
    _save(fig, path)


def concept_extremes(con, path: Path) -> None:
    """Top and bottom concepts by chi_bench (across benchmarks) and by the dense model's
    chi_model."""
    bench = con.sql("SELECT * FROM chi_bench WHERE dataset = 'all' AND n_active > 0").pl()
    model_df = con.sql("""SELECT * FROM chi_model WHERE dataset = 'all' AND method = 'dense'
        AND format = 'open'
                          AND supported AND population = 'pool'""").pl()
    models = sorted(bench["model"].unique().to_list())
    fig, axes = _grid(len(models), 4, width=4.6, height=4.2)
    n = 10
    for r, model in enumerate(models):
        b = bench.filter(pl.col("model") == model)
        m = model_df.filter(pl.col("model") == model)
        _bars(
            axes[r][0],
            b.sort(["chi_bench", "concept"], descending=[True, False]).head(n),
            "chi_bench",
            f"{model}: best covered",
            "chi_bench (across benchmarks)",
            "tab:green",
        )
        _bars(
            axes[r][1],
            b.sort(["chi_bench", "concept"]).head(n),
            "chi_bench",
            f"{model}: least covered (active)",
            "chi_bench (across benchmarks)",
            "tab:red",
        )
        _bars(
            axes[r][2],
            m.sort(["chi_model", "concept"], descending=[True, False]).head(n),
            "chi_model",
            f"{model}: dense model strongest",
            "chi_model (open, dense, pool items)",
            "tab:blue",
        )
        _bars(
            axes[r][3],
            m.sort(["chi_model", "concept"]).head(n),
            "chi_model",
            f"{model}: dense model weakest (gaps)",
            "chi_model (open, dense, pool items)",
            "tab:orange",
        )
        for ax in axes[r][2:]:
            ax.set_xlim(0, 1.12)  # room for the value printed after a bar at 1
    fig.suptitle(
        "Top and bottom concepts: benchmark coverage (chi_bench) "
        "and dense-model performance (chi_model)",
        fontsize=12,
    )
    _save(fig, path)


NO_SIGNIFICANT_DAMAGE = "no concept is significantly damaged"


def concept_damage(con, path: Path) -> None:
    """Per method: the concepts pruning damages beyond their languages
    (concept_damage.significant_open)."""
    _save(_concept_damage_figure(con), path)


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
    fig, _, panels = _method_panels(methods, models, "no pruned checkpoint")
    n = 12
    for ax, model, method, _d in panels:
        m = best.filter((pl.col("model") == model) & (pl.col("method") == method)).head(n)
        ax.set_title(f"{model}: {method}", fontsize=10)
        if m.height == 0:
            _empty(ax, NO_SIGNIFICANT_DAMAGE)
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
                f"{_concept_name(r, 26)}  s{r['sparsity']:g}{_label_unstructured(r['structure'])} "
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
