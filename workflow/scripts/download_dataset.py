from benchmark_illusion import logs, pipeline

logs.to_file(snakemake.log[0])
pipeline.download_dataset(snakemake.params.dataset, snakemake.wildcards.lang, snakemake.output[0])
