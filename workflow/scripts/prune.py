from benchmark_illusion import logs, pipeline
from benchmark_illusion.compression.names import parse_replicate

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
pipeline.prune_file(
    snakemake.input.model,
    snakemake.input.calibration or None,
    snakemake.output[0],
    snakemake.params.prune,  # exactly what re-runs this rule when it changes
    model=w.model,
    method=parse_replicate(w.method)[0],  # <method>-s<seed>: the seed acts through its input
    structure=w.structure,
    sparsity=float(w.sparsity),
    device=snakemake.config["evaluation"]["device"],  # where it runs: never changes a weight
    trust_remote_code=snakemake.config["models"][w.model]["trust_remote_code"],
    threads=snakemake.threads,
)
