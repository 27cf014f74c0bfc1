# The floors: per pruned or quantized checkpoint, kind and seed, the dense model changed by
# seeded noise of the checkpoint's size (noise<seed>-), damage (damage<seed>-) or sparsity at its
# damage (mask<seed>-), and the negative control placebo-<source>; written in the checkpoint
# layout so that `evaluate` treats it like any checkpoint (docs/metrics.md, "The floors").
rule perturb:
    input:
        model="resources/models/{model}",
        source=get_perturbation_source,
        damage_text=get_damage_text,
    output:
        directory("results/checkpoints/{model}/{method}/{structure}/{sparsity}"),
    log:
        "logs/perturb/{model}/{method}/{structure}/{sparsity}.log",
    benchmark:
        "logs/benchmarks/perturb/{model}/{method}/{structure}/{sparsity}.tsv"
    wildcard_constraints:
        method=PERTURBED_METHODS,
    priority: 20  # like prune: a checkpoint first, its evaluations after
    # two loads, one pass over the weights, a few forward passes on the held-out windows (the
    # damage search) and a save, on the CPU: sized like the model's import
    threads: 1
    resources:
        mem_mb=sized("import", "mem_mb"),
        runtime=sized("import", "runtime"),
    params:
        perturb=get_perturb_params,
    script:
        "../scripts/perturb.py"


# The positive control `forbid`: the dense model's files and control.json, which makes
# `evaluate` forbid each gold's first token in every decode (docs/metrics.md, "Controls").
rule control:
    input:
        model="resources/models/{model}",
    output:
        directory("results/checkpoints/{model}/forbid/none/0"),
    log:
        "logs/control/{model}.log",
    priority: 20
    threads: 1
    resources:
        mem_mb=sized("import", "mem_mb"),
        runtime=sized("import", "runtime"),
    script:
        "../scripts/control.py"
