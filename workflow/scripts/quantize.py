from benchmark_illusion import logs, pipeline

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
pipeline.quantize_file(
    snakemake.input.model,
    snakemake.input.calibration or None,
    snakemake.output[0],
    snakemake.params.quantize,  # exactly what re-runs this rule when it changes
    model=w.model,
    method=w.method,
    structure=w.structure,  # the grid, e.g. int4-g128
    device=snakemake.config["evaluation"]["device"],  # where it runs: never changes a weight
    trust_remote_code=snakemake.config["models"][w.model]["trust_remote_code"],
    threads=snakemake.threads,
)
