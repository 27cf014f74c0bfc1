# Two rules for one output: hub models (downloaded and converted on a cluster's GPU nodes, which
# have the memory for them; profiles/slurm sends import_hub_model there) and models from local
# files or a package (import_model, CPU). Each model matches exactly one of them.


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
