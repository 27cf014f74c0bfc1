"""The figures by name, the one list of them: make_figures draws them, the workflow's `figures`
and `concept_figures` rules write results/figures/{name}.png with the caption
workflow/report/{name}.rst and the report label below, the default target asks for them, and the
tests read them from here. Imports nothing: the Snakefile's parse reads it."""

from __future__ import annotations

# name -> its label in the Snakemake report (the number orders the figures of a category)
METRIC_LABELS = {
    "accuracy_vs_sparsity": "1 accuracy vs sparsity",
    "mc_only_by_language": "2 MC-only rate by language",
    "mc_only_split": "2b MC-only items by status",
    "gold_rank_cdf": "3 gold-rank CDF",
    "recovery_by_decode": "4 recovery by decode",
    "position_bias": "5 position bias",
    "oracle_vs_sparsity": "6 greedy vs oracle accuracy",
    "accuracy_vs_size": "7 pruning and quantization at matched size",
}
CONCEPT_LABELS = {
    "concept_coverage": "5 concept coverage",
    "concept_extremes": "6 top and bottom concepts",
    "concept_damage": "7 concepts damaged by pruning",
}
# the figures of the metric tables (rule `figures`) and of the concept tables (`concept_figures`)
METRIC_FIGURES = tuple(METRIC_LABELS)
CONCEPT_FIGURES = tuple(CONCEPT_LABELS)


def figure_file(name: str) -> str:
    """Where the workflow writes figure `name`."""
    return f"results/figures/{name}.png"
