from benchmark_illusion import logs
from benchmark_illusion.compression.names import parse_replicate
from benchmark_illusion.compression.steps import prune_file
from benchmark_illusion.models.keys import CheckpointKey, Placement

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
prune_file(
    snakemake.input.model,
    snakemake.input.calibration or None,
    snakemake.output[0],
    snakemake.params.prune,  # exactly what re-runs this rule when it changes
    # <method>-s<seed>: the seed acts through its input
    CheckpointKey.from_wildcards(w, method=parse_replicate(w.method)[0]),
    # where it runs (the config's device, the job's threads): never changes a weight
    Placement.of_job(snakemake.config, w.model, snakemake.threads),
)
