"""Writing the figures: make_figures draws named figures (figures/names.py lists them) from the
results database into PNG files."""

from __future__ import annotations

from pathlib import Path

from benchmark_illusion.metrics.aggregate import connect

# make_figures looks the figures up by name in this module's globals
from benchmark_illusion.metrics.figures.accuracy import (  # noqa: F401
    accuracy_vs_size,
    accuracy_vs_sparsity,
    mc_only_by_language,
    mc_only_split,
)
from benchmark_illusion.metrics.figures.concepts import (  # noqa: F401
    concept_coverage,
    concept_damage,
    concept_extremes,
)
from benchmark_illusion.metrics.figures.diagnostics import (  # noqa: F401
    gold_rank_cdf,
    oracle_vs_sparsity,
    position_bias,
    recovery_by_decode,
)
from benchmark_illusion.metrics.figures.names import METRIC_FIGURES as FIGURES


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
