from benchmark_illusion import logs
from benchmark_illusion.data import steps as datasteps

logs.to_file(snakemake.log[0])
datasteps.select_items_file(
    snakemake.input.pool,
    snakemake.input.item_table,
    snakemake.output[0],
    cap=snakemake.params.cap,
    seed=snakemake.params.seed,
)
