rule calibration_data:
    input:
        unpack(get_calibration_sources),
        model="resources/models/{model}",
    output:
        # s<seed>: a replicate's calibration windows; damage: the held-out windows a twin's
        # damage is measured on (never a calibration window of any seed)
        "results/calibration/{model}/{draw}.safetensors",
    log:
        "logs/calibration_data/{model}/{draw}.log",
    wildcard_constraints:
        draw="damage|s(?:0|[1-9][0-9]*)",
    priority: 30
    resources:
        mem_mb=sized("calibration", "mem_mb"),
        runtime=sized("calibration", "runtime"),
    params:
        calibration=get_calibration_params(),
        seed=config["seed"],
    script:
        "../scripts/calibration_data.py"


rule prune:
    input:
        model="resources/models/{model}",
        calibration=get_calibration_input,
    output:
        directory("results/checkpoints/{model}/{method}/{structure}/{sparsity}"),
    log:
        "logs/prune/{model}/{method}/{structure}/{sparsity}.log",
    benchmark:
        "logs/benchmarks/prune/{model}/{method}/{structure}/{sparsity}.tsv"
    wildcard_constraints:
        method=PRUNE_METHODS,
        structure=PRUNE_STRUCTURES,
    priority: 20  # a checkpoint first, its evaluations after: see docs/cluster.md
    threads: threads_of("prune")  # 1 or 4 (capped at --cores): resources.smk
    resources:
        **gpu_sized("prune"),
        mem_mb=sized("prune", "mem_mb"),
        runtime=sized("prune", "runtime"),
    params:
        prune=get_prune_params,
    script:
        "../scripts/prune.py"


# Quantized checkpoints share the checkpoint layout (sparsity 0, the grid as structure), so
# `evaluate` and everything after it treat them like pruned ones.
rule quantize:
    input:
        model="resources/models/{model}",
        calibration=get_calibration_input,
    output:
        directory("results/checkpoints/{model}/{method}/{structure}/{sparsity}"),
    log:
        "logs/quantize/{model}/{method}/{structure}/{sparsity}.log",
    benchmark:
        "logs/benchmarks/quantize/{model}/{method}/{structure}/{sparsity}.tsv"
    wildcard_constraints:
        method=QUANT_METHODS,
        structure=QUANT_STRUCTURES,
        sparsity="0",
    priority: 20
    threads: threads_of("quantize")  # 1 or 4 (capped at --cores): resources.smk
    resources:
        **gpu_sized("prune"),
        mem_mb=sized("prune", "mem_mb"),  # the same block-by-block pass as pruning
        runtime=sized("prune", "runtime"),
    params:
        quantize=get_quantize_params,
    script:
        "../scripts/quantize.py"


rule evaluate:
    input:
        model=get_checkpoint,
        item_table="results/selected/{model}/{dataset}/{lang}.parquet",
        exemplars="results/items/{dataset}/{lang}.parquet",
    output:
        "results/generations/{model}/{method}/{structure}/{sparsity}/{dataset}/{lang}.parquet",
    log:
        "logs/evaluate/{model}/{method}/{structure}/{sparsity}/{dataset}/{lang}.log",
    benchmark:
        "logs/benchmarks/evaluate/{model}/{method}/{structure}/{sparsity}/{dataset}/{lang}.tsv"
    wildcard_constraints:
        # the dense model too (dense/none/0): the same rule, batch size, dtype and device as a
        # pruned checkpoint, so that its MC-only rate and drops are the noise floor; the
        # perturbed twins too, whose rates are the perturbation floor; and the variants made
        # elsewhere, on their base model's selected items
        method=f"dense|{PRUNE_METHODS}|{QUANT_METHODS}|{PERTURBED_METHODS}|{VARIANT_METHODS}|{CONTROL_METHODS}",
        structure=f"none|{PRUNE_STRUCTURES}|{QUANT_STRUCTURES}|{VARIANT_STRUCTURE}",
    threads: threads_of("evaluate")  # 1 or 4 (capped at --cores): resources.smk
    resources:
        **gpu_sized("evaluate"),
        mem_mb=sized("evaluate", "mem_mb"),
        runtime=sized("evaluate", "runtime"),
    params:
        eval=get_eval_config,
    script:
        "../scripts/evaluate.py"
