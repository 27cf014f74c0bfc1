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
        # the stamp; the rule publishes METRICS_DB beside it (common.smk)
        METRICS_STAMP,
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
        METRICS_STAMP,
    output:
        [
            report(
                figure_file(name),
                caption=f"../report/{name}.rst",
                category="Figures",
                labels={"figure": label},
            )
            for name, label in figure_names.METRIC_LABELS.items()
        ],
    log:
        "logs/figures.log",
    script:
        "../scripts/figures.py"
