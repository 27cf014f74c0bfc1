from benchmark_illusion import logs
from benchmark_illusion.compression.steps import control_file

logs.to_file(snakemake.log[0])
control_file(snakemake.input.model, snakemake.output[0], model=snakemake.wildcards.model)
