rule download_dataset:
    input:
        get_raw_input,
    output:
        "resources/datasets/{dataset}/{lang}.parquet",
    log:
        "logs/download_dataset/{dataset}/{lang}.log",
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        dataset=get_dataset_config,
    script:
        "../scripts/download_dataset.py"


rule build_items:
    input:
        "resources/datasets/{dataset}/{lang}.parquet",
    output:
        table="results/items/{dataset}/{lang}.parquet",
        report="results/items/{dataset}/{lang}.report.json",
    log:
        "logs/build_items/{dataset}/{lang}.log",
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        seed=config["seed"],
        extractive=get_extractive,
        distractors=config["items"]["distractors"],
    script:
        "../scripts/build_items.py"
