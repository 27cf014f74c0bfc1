rule import_model:
    output:
        directory("resources/models/{model}"),
    log:
        "logs/import_model/{model}.log",
    benchmark:
        "logs/benchmarks/import_model/{model}.tsv"
    resources:
        mem_mb=16000,
        runtime=60,
    params:
        model=get_model_config,
    script:
        "../scripts/import_model.py"
