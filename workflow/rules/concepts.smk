# Competency gaps (docs/concepts.md): an SAE on the dense model's residual stream, labels of its
# latents, per-item concept activations, and the gap tables next to the metric tables.
# Only included rules run when concepts.enabled is true (the default).


rule sae:
    input:
        unpack(get_sae_input),
    output:
        directory("results/concepts/{model}/sae"),
    log:
        "logs/sae/{model}.log",
    benchmark:
        "logs/benchmarks/sae/{model}.tsv"
    priority: 20
    threads: threads_of("sae")  # 4 (capped at --cores): resources.smk
    resources:
        **gpu_sized("sae"),
        mem_mb=sized("sae", "mem_mb"),
        runtime=sized("sae", "runtime"),
    params:
        config=get_sae_params,
    script:
        "../scripts/sae.py"


rule concept_labels:
    input:
        sae="results/concepts/{model}/sae",
        model="resources/models/{model}",
    output:
        "results/concepts/{model}/labels.parquet",
    log:
        "logs/concept_labels/{model}.log",
    benchmark:
        "logs/benchmarks/concept_labels/{model}.tsv"
    threads: threads_of("concept_labels")  # 1 or 4 (capped at --cores): resources.smk
    resources:
        **gpu_sized("concepts"),
        mem_mb=sized("concepts", "mem_mb"),
        runtime=sized("concepts", "runtime"),
    params:
        config=get_label_params(),
    script:
        "../scripts/concept_labels.py"


rule concept_activations:
    input:
        sae="results/concepts/{model}/sae",
        model="resources/models/{model}",
        item_table="results/items/{dataset}/{lang}.parquet",
    output:
        activations="results/concepts/{model}/activations/{dataset}/{lang}.parquet",
        tokens="results/concepts/{model}/activations/{dataset}/{lang}.tokens.parquet",
    log:
        "logs/concept_activations/{model}/{dataset}/{lang}.log",
    benchmark:
        "logs/benchmarks/concept_activations/{model}/{dataset}/{lang}.tsv"
    threads: threads_of("concept_activations")  # 1 or 4 (capped at --cores): resources.smk
    resources:
        **gpu_sized("concepts"),
        mem_mb=sized("concepts", "mem_mb"),
        runtime=sized("concepts", "runtime"),
    params:
        config=get_activation_params(),
    script:
        "../scripts/concept_activations.py"


rule competency_gaps:
    input:
        db=METRICS_STAMP,
        activations=concept_activation_files(),
        tokens=concept_activation_files(".tokens"),
        labels=expand("results/concepts/{model}/labels.parquet", model=MODELS),
        sae=expand("results/concepts/{model}/sae", model=MODELS),
        sql=concept_sql_files(),
    output:
        # the stamp; the rule publishes results/illusion.duckdb beside it (common.smk)
        ILLUSION_STAMP,
    log:
        "logs/competency_gaps.log",
    resources:
        mem_mb=aggregate_sized("mem_mb"),
        runtime=aggregate_sized("runtime"),
    params:
        gaps=get_gap_settings(),
    script:
        "../scripts/competency_gaps.py"


rule concept_figures:
    input:
        ILLUSION_STAMP,
    output:
        [
            report(
                figure_file(name),
                caption=f"../report/{name}.rst",
                category="Concepts",
                labels={"figure": label},
            )
            for name, label in figure_names.CONCEPT_LABELS.items()
        ],
    log:
        "logs/concept_figures.log",
    script:
        "../scripts/concept_figures.py"
