from benchmark_illusion import logs
from benchmark_illusion.data import steps as datasteps

logs.to_file(snakemake.log[0])
datasteps.build_items_file(
    snakemake.input[0],
    snakemake.output.table,
    snakemake.output.report,
    seed=snakemake.params.seed,
    extractive=snakemake.params.extractive,
    dataset=snakemake.wildcards.dataset,
    distractors=snakemake.params.distractors,
)
