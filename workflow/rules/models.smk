# Two rules for one output: hub models (downloaded by fetch_hub_model where the run starts, then
# converted on a cluster's GPU nodes, which have the memory for them; profiles/slurm sends
# import_hub_model there) and models from local files or a package (import_model, CPU). Each
# model matches exactly one of them.


# Network jobs run where snakemake runs (login nodes usually have internet, compute nodes often
# do not): the hub model download, the datasets, and the calibration text (C4 streams from the
# hub). The compute jobs read what they wrote. `snakemake prefetch` runs the downloads alone.
localrules:
    fetch_hub_model,
    fetch_hub_variant,
    download_dataset,
    calibration_data,
    prefetch,


rule fetch_hub_model:
    output:
        "resources/hub/{model}.json",
    log:
        "logs/fetch_hub_model/{model}.log",
    wildcard_constraints:
        model=one_of(HUB_MODELS),
    params:
        model=get_model_config,
    script:
        "../scripts/fetch_hub_model.py"


rule fetch_hub_variant:
    output:
        "resources/hub/{model}/{variant}.json",
    log:
        "logs/fetch_hub_model/{model}/{variant}.log",
    wildcard_constraints:
        variant=VARIANT_METHODS,
    params:
        model=get_variant_source,
    script:
        "../scripts/fetch_hub_model.py"


rule prefetch:
    input:
        prefetch_files(),


rule import_model:
    output:
        directory("resources/models/{model}"),
    log:
        "logs/import_model/{model}.log",
    benchmark:
        "logs/benchmarks/import_model/{model}.tsv"
    wildcard_constraints:
        model=one_of(FILE_MODELS),
    resources:
        mem_mb=sized("import", "mem_mb"),
        runtime=sized("import", "runtime"),
    params:
        model=get_model_config,
    script:
        "../scripts/import_model.py"


rule import_hub_model:
    input:
        "resources/hub/{model}.json",
    output:
        directory("resources/models/{model}"),
    log:
        "logs/import_model/{model}.log",
    benchmark:
        "logs/benchmarks/import_model/{model}.tsv"
    wildcard_constraints:
        model=one_of(HUB_MODELS),
    resources:
        mem_mb=sized("import", "mem_mb"),
        runtime=sized("import", "runtime"),
    params:
        model=get_model_config,
    script:
        "../scripts/import_model.py"


# A compressed variant made elsewhere (models.<model>.variants.<name>): imported like a model,
# measured (variant.json), and its tokenizer compared with the base model's import.
rule import_variant:
    input:
        unpack(get_variant_inputs),
    output:
        directory("resources/variants/{model}/{variant}"),
    log:
        "logs/import_variant/{model}/{variant}.log",
    benchmark:
        "logs/benchmarks/import_variant/{model}/{variant}.tsv"
    wildcard_constraints:
        variant=VARIANT_METHODS,
    resources:
        mem_mb=sized("import", "mem_mb"),
        runtime=sized("import", "runtime"),
    params:
        variant=get_variant_params,
    script:
        "../scripts/import_variant.py"
