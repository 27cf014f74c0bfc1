from benchmark_illusion import logs, pipeline

logs.to_file(snakemake.log[0])
pipeline.dense_generations_file(snakemake.input.pool, snakemake.input.selected, snakemake.output[0])
