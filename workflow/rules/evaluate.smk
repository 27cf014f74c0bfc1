rule evaluate_pool:
    input:
        model="resources/models/{model}",
        item_table="results/items/{dataset}/{lang}.parquet",
    output:
        "results/pool/{model}/{dataset}/{lang}.parquet",
    log:
        "logs/evaluate_pool/{model}/{dataset}/{lang}.log",
    benchmark:
        "logs/benchmarks/evaluate_pool/{model}/{dataset}/{lang}.tsv"
    priority: 30  # gates the item selection, hence every evaluate job: see docs/cluster.md
    threads: threads_of("evaluate_pool")  # 1 or 4 (capped at --cores): resources.smk
    resources:
        **gpu_sized("evaluate"),
        mem_mb=sized("evaluate", "mem_mb"),
        runtime=sized("evaluate", "runtime"),
    params:
        eval=get_pool_eval_config,
        pool_max=config["items"]["pool_max"],
    script:
        "../scripts/evaluate.py"


rule select_items:
    input:
        pool="results/pool/{model}/{dataset}/{lang}.parquet",
        item_table="results/items/{dataset}/{lang}.parquet",
    output:
        "results/selected/{model}/{dataset}/{lang}.parquet",
    log:
        "logs/select_items/{model}/{dataset}/{lang}.log",
    priority: 30
    params:
        cap=config["items"]["max_per_language"],
        seed=config["seed"],
    script:
        "../scripts/select_items.py"
