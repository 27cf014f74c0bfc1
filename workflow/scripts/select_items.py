from benchmark_illusion import datasteps, logs

logs.to_file(snakemake.log[0])
datasteps.select_items_file(
    snakemake.input.pool,
    snakemake.input.item_table,
    snakemake.output[0],
    cap=snakemake.params.cap,
    seed=snakemake.params.seed,
)
