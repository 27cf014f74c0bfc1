from benchmark_illusion import datasteps, logs

logs.to_file(snakemake.log[0])
datasteps.download_dataset(snakemake.params.dataset, snakemake.wildcards.lang, snakemake.output[0])
