from benchmark_illusion import logs, pipeline

logs.to_file(snakemake.log[0])
pipeline.select_items_file(
    snakemake.input.pool,
    snakemake.input.item_table,
    snakemake.output[0],
    cap=snakemake.params.cap,
    seed=snakemake.params.seed,
)
