rule aggregate:
    input:
        generations=generation_files(),
        selected=selected_files(),
        pool=pool_files(),
        sql=sql_files(),
    output:
        "results/illusion.duckdb",
    log:
        "logs/aggregate.log",
    script:
        "../scripts/aggregate.py"
