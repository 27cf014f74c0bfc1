from benchmark_illusion import logs
from benchmark_illusion.data import steps as datasteps

logs.to_file(snakemake.log[0])
datasteps.download_dataset(snakemake.params.dataset, snakemake.wildcards.lang, snakemake.output[0])
