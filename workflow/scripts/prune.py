from benchmark_illusion import logs, pipeline

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
pipeline.prune_file(
    snakemake.input.model,
    snakemake.input.calibration or None,
    snakemake.output[0],
    snakemake.config,  # params.prune only makes relevant config changes re-run this rule
    model=w.model,
    method=w.method,
    structure=w.structure,
    sparsity=float(w.sparsity),
    threads=snakemake.threads,
)
