"""What the figures share: format and decode labels, method colours, and the helpers that lay
out panels, draw error bars, label axes and save a figure as PNG."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: select the backend before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from benchmark_illusion.compression.names import is_control  # noqa: E402
from benchmark_illusion.io import atomic_path  # noqa: E402

log = logging.getLogger("benchmark_illusion")

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


def method_color(method: str, i: int = 0) -> str:
    return METHOD_COLORS.get(method, f"C{3 + i}")


def save_figure(fig, path: Path) -> None:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, ".png") as tmp:
        fig.savefig(tmp, dpi=130, bbox_inches="tight", format="png")
    plt.close(fig)
    log.info("wrote %s", path)


def panel_grid(n_rows: int, n_cols: int, width: float = 4.2, height: float = 3.4):
    fig, axes = plt.subplots(
        max(n_rows, 1),
        max(n_cols, 1),
        figsize=(width * max(n_cols, 1), height * max(n_rows, 1)),
        squeeze=False,
    )
    return fig, axes


def empty_panel(ax, text: str) -> None:
    ax.text(
        0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="0.4"
    )
    ax.set_xticks([])
    ax.set_yticks([])


def errorbar(ax, df: pl.DataFrame, x: str, y: str, lo: str, hi: str, **kw) -> None:
    df = df.sort(x)
    yerr = [
        (df[y] - df[lo]).clip(lower_bound=0).to_list(),
        (df[hi] - df[y]).clip(lower_bound=0).to_list(),
    ]
    ax.errorbar(df[x].to_list(), df[y].to_list(), yerr=yerr, capsize=3, **kw)


def pruning_methods(df: pl.DataFrame) -> list[str]:
    """The pruning methods of the rows (the sparsity figures' panels and lines): neither dense
    nor quantized (a `bits` value; quantized checkpoints are drawn by accuracy_vs_size) nor a
    perturbed twin (noise0-wanda: its rates are drawn as the perturbation floor, where a figure
    shows one, not as a method of their own) nor a control (forbid, placebo-wanda)."""
    if "bits" in df.columns:
        df = df.filter(pl.col("bits").is_null())
    return sorted(m for m in df["method"].unique().to_list() if m != "dense" and not is_control(m))


def label_unstructured(structure: str) -> str:
    return "" if structure == "unstructured" else f" {structure}"


def method_panels(df: pl.DataFrame, models: list[str], empty: str):
    """A figure with one row per model and one panel per pruning method of that model.

    Returns (fig, axes, panels); panels yields (ax, model, method, the model's rows). A model
    without pruned rows gets `empty` in its first panel; panels a row does not use are hidden.
    """
    n_cols = max([len(pruning_methods(df.filter(pl.col("model") == m))) for m in models] + [1])
    fig, axes = panel_grid(len(models), n_cols)

    def panels():
        for r, model in enumerate(models):
            d = df.filter(pl.col("model") == model)
            methods = pruning_methods(d)
            if not methods:
                empty_panel(axes[r][0], f"{model}: {empty}")
            for c in range(max(len(methods), 1), n_cols):
                axes[r][c].set_visible(False)
            for c, method in enumerate(methods):
                yield axes[r][c], model, method, d

    return fig, axes, panels()


def label_panel(
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


def shared_legend(fig, axes, ncol: int, fontsize: int, title: str | None = None) -> None:
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
