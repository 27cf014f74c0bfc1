# The perturbation floor: per pruned or quantized checkpoint and seed, the dense model with
# seeded Gaussian noise of the checkpoint's relative size per Linear (method
# noise<seed>-<source method>, the source's structure and sparsity), written in the checkpoint
# layout so that `evaluate` treats it like any checkpoint (docs/metrics.md, "The two floors").
rule perturb:
    input:
        model="resources/models/{model}",
        source=get_perturbation_source,
    output:
        directory("results/checkpoints/{model}/{method}/{structure}/{sparsity}"),
    log:
        "logs/perturb/{model}/{method}/{structure}/{sparsity}.log",
    benchmark:
        "logs/benchmarks/perturb/{model}/{method}/{structure}/{sparsity}.tsv"
    wildcard_constraints:
        method=PERTURBED_METHODS,
    priority: 20  # like prune: a checkpoint first, its evaluations after
    # a load, one pass over the weights on the CPU and a save: sized like the model's import
    threads: 1
    resources:
        mem_mb=sized("import", "mem_mb"),
        runtime=sized("import", "runtime"),
    params:
        perturb=get_perturb_params,
    script:
        "../scripts/perturb.py"
