rule aggregate:
    input:
        generations=generation_files(),
        selected=selected_files(),
        pool=pool_files(),
        item_reports=item_report_files(),
        # the perturbed twins' folders, for their perturbation.json (the `perturbations` table)
        perturbations=perturbed_checkpoints(),
        # the variants' imports, for their variant.json (the `variants` table)
        variants=variant_folders(),
        sql=sql_files(),
    output:
        METRICS_DB,
    log:
        "logs/aggregate.log",
    resources:
        mem_mb=aggregate_sized("mem_mb"),
        runtime=aggregate_sized("runtime"),
    params:
        metrics=get_metric_settings(),
        # how each source stores its weights (the `model_sources` table): a GGUF's real precision
        model_sources=get_model_sources(),
    script:
        "../scripts/aggregate.py"


rule figures:
    input:
        # the metric tables only: a change of concept settings does not redraw these
        METRICS_DB,
    output:
        report(
            "results/figures/accuracy_vs_sparsity.png",
            caption="../report/accuracy_vs_sparsity.rst",
            category="Figures",
            labels={"figure": "1 accuracy vs sparsity"},
        ),
        report(
            "results/figures/mc_only_by_language.png",
            caption="../report/mc_only_by_language.rst",
            category="Figures",
            labels={"figure": "2 MC-only rate by language"},
        ),
        report(
            "results/figures/mc_only_split.png",
            caption="../report/mc_only_split.rst",
            category="Figures",
            labels={"figure": "2b MC-only items by status"},
        ),
        report(
            "results/figures/gold_rank_cdf.png",
            caption="../report/gold_rank_cdf.rst",
            category="Figures",
            labels={"figure": "3 gold-rank CDF"},
        ),
        report(
            "results/figures/recovery_by_decode.png",
            caption="../report/recovery_by_decode.rst",
            category="Figures",
            labels={"figure": "4 recovery by decode"},
        ),
        report(
            "results/figures/position_bias.png",
            caption="../report/position_bias.rst",
            category="Figures",
            labels={"figure": "5 position bias"},
        ),
        report(
            "results/figures/oracle_vs_sparsity.png",
            caption="../report/oracle_vs_sparsity.rst",
            category="Figures",
            labels={"figure": "6 greedy vs oracle accuracy"},
        ),
        report(
            "results/figures/accuracy_vs_size.png",
            caption="../report/accuracy_vs_size.rst",
            category="Figures",
            labels={"figure": "7 pruning and quantization at matched size"},
        ),
    log:
        "logs/figures.log",
    script:
        "../scripts/figures.py"
