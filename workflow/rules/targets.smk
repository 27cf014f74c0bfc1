# Target lists: the files the rules write and read, from the config (checkpoints of the grid,
# their twins and controls, evaluation logs, the default target).

import glob

from benchmark_illusion.compression.structures import Grid, parse_structure
from benchmark_illusion.metrics.figures import names as figure_names
from benchmark_illusion.metrics.figures.names import figure_file


def dense_generation_files():
    """Dense evaluation logs on the selected items, one per model x dataset x lang (the dense
    model through the same `evaluate` rule as every pruned checkpoint, hence its noise floor).
    """
    return [
        f"results/generations/{m}/dense/none/0/{d}/{l}.parquet"
        for m in MODELS
        for d, l in dataset_langs()
    ]


def pruning_targets():
    """(method, structure path, sparsity str) of every pruned checkpoint in the grid, one per
    replicate (<method>-s<seed> after the first seed)."""
    from benchmark_illusion.compression.names import replicate_method
    from benchmark_illusion.config.validate import nm_patterns

    p = config["pruning"]
    points = [("unstructured", s) for s in p["sparsities"]]
    for pattern in nm_patterns(p):
        st = parse_structure(pattern)
        points.append((st.path, st.sparsity))
    return [
        (replicate_method(m, seed, method_seeds(m)), st, sparsity_str(s))
        for m in p["methods"]
        for seed in method_seeds(m)
        for st, s in points
    ]


def quantization_targets():
    """(method, grid name, sparsity str '0') of every quantized checkpoint in the grid: every
    method x bit width on the configured grid (e.g. ('gptq', 'int4-g128', '0')), one per
    replicate."""
    from benchmark_illusion.compression.names import replicate_method

    q = config["quantization"]
    return [
        (
            replicate_method(m, seed, method_seeds(m)),
            str(Grid(b, q["group_size"], q["symmetric"])),
            "0",
        )
        for m in q["methods"]
        for seed in method_seeds(m)
        for b in q["bits"]
    ]


def variant_targets(model):
    """(variant name, 'variant', sparsity str) of every variant of {model}."""
    return [
        (v, VARIANT_STRUCTURE, variant_defs.sparsity_key(spec))
        for m, v, spec in VARIANTS
        if m == model
    ]


def compressed_targets(model):
    """(method, structure path, sparsity str) of every compressed checkpoint of {model}: the
    pipeline's pruned and quantized ones and the model's variants."""
    return pruning_targets() + quantization_targets() + variant_targets(model)


def compressed_generation_files():
    """Evaluation logs of every pruned and quantized checkpoint and every variant on the
    selected items."""
    return [
        f"results/generations/{m}/{meth}/{st}/{s}/{d}/{l}.parquet"
        for m in MODELS
        for meth, st, s in compressed_targets(m)
        for d, l in dataset_langs()
    ]


def variant_folders():
    """The variants' imports (their variant.json feeds the `variants` table)."""
    return [f"resources/variants/{m}/{v}" for m, v, _ in VARIANTS]


def perturbation_targets(model):
    """(method, structure path, sparsity str) of every twin of {model}: one per compressed
    checkpoint (variants included), kind of controls.perturbation.match and seed of
    controls.perturbation.seeds (none when it is empty; structure twins of pruned checkpoints
    only), and the placebo (negative control) of every checkpoint of the method
    controls.negative names (its first replicate)."""
    from benchmark_illusion.compression.names import (
        parse_replicate,
        perturbed_method,
        placebo_method,
    )

    pruned = {(m, st, s) for m, st, s in pruning_targets()}
    twins = [
        (perturbed_method(seed, meth, kind), st, s)
        for kind in PERTURBATION["match"]
        for seed in PERTURBATION_SEEDS
        for meth, st, s in compressed_targets(model)
        if kind != "structure" or (meth, st, s) in pruned
    ]
    negative = config["controls"]["negative"]
    placebos = (
        [
            (placebo_method(meth), st, s)
            for meth, st, s in pruning_targets() + quantization_targets()
            if negative is not None
            and meth == negative
            and parse_replicate(meth)[1] is None
        ]
        if PERTURBATION_SEEDS
        else []
    )
    return twins + placebos


def control_targets():
    """(method, structure, sparsity) of the positive control (controls.positive)."""
    return [(CONTROL_METHODS, "none", "0")] if config["controls"]["positive"] else []


def control_generation_files():
    return [
        f"results/generations/{m}/{meth}/{st}/{s}/{d}/{l}.parquet"
        for m in MODELS
        for meth, st, s in control_targets()
        for d, l in dataset_langs()
    ]


def perturbed_checkpoints():
    """The perturbed twins' checkpoint folders (their perturbation.json feeds `checkpoints`)."""
    return [
        f"results/checkpoints/{m}/{meth}/{st}/{s}"
        for m in MODELS
        for meth, st, s in perturbation_targets(m)
    ]


def perturbed_generation_files():
    """Evaluation logs of every perturbed twin on the selected items."""
    return [
        f"results/generations/{m}/{meth}/{st}/{s}/{d}/{l}.parquet"
        for m in MODELS
        for meth, st, s in perturbation_targets(m)
        for d, l in dataset_langs()
    ]


def generation_files():
    """Every evaluation log the aggregation reads."""
    return (
        dense_generation_files()
        + compressed_generation_files()
        + perturbed_generation_files()
        + control_generation_files()
    )


def selected_files():
    """Selected-item files, one per model x dataset x lang."""
    return [
        f"results/selected/{m}/{d}/{l}.parquet"
        for m in MODELS
        for d, l in dataset_langs()
    ]


def prefetch_files():
    """What the downloads write: every hub model's and hub variant's files (in the hub cache;
    the record here) and every dataset language (the `prefetch` target)."""
    return (
        [f"resources/hub/{m}.json" for m in HUB_MODELS]
        + [f"resources/hub/{m}/{v}.json" for m, v in HUB_VARIANTS]
        + [f"resources/datasets/{d}/{l}.parquet" for d, l in dataset_langs()]
    )


def sql_files():
    """The metric definitions, run in name order by the aggregation."""
    return sorted(glob.glob(str(WORKFLOW_DIR / "sql" / "*.sql")))


def item_report_files():
    """build_items reports (rows dropped and why), one per dataset x lang."""
    return [f"results/items/{d}/{l}.report.json" for d, l in dataset_langs()]


def pool_files():
    """Dense evaluations of the selection pools, one per model x dataset x lang."""
    return [
        f"results/pool/{m}/{d}/{l}.parquet" for m in MODELS for d, l in dataset_langs()
    ]


def get_final_output():
    """Targets of the default target `all` (the database, by its stamp, and the figures; the
    report is built from them)."""
    figures = figure_names.METRIC_FIGURES
    if CONCEPTS:
        figures += figure_names.CONCEPT_FIGURES
    return [ILLUSION_STAMP] + [figure_file(name) for name in figures]


def concept_activation_files(suffix=""):
    """Per-item concept activations of every model x benchmark (.tokens: token counts)."""
    return [
        f"results/concepts/{m}/activations/{d}/{l}{suffix}.parquet"
        for m in MODELS
        for d, l in dataset_langs()
    ]


def concept_sql_files():
    """The competency-gap definitions, run in name order."""
    return sorted(glob.glob(str(WORKFLOW_DIR / "sql" / "concepts" / "*.sql")))
