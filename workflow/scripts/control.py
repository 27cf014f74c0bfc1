from benchmark_illusion import logs
from benchmark_illusion.compression import perturbation

logs.to_file(snakemake.log[0])
perturbation.control_file(
    snakemake.input.model, snakemake.output[0], model=snakemake.wildcards.model
)
