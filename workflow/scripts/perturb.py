from benchmark_illusion import logs
from benchmark_illusion.compression.steps import perturb_file
from benchmark_illusion.models.keys import CheckpointKey, Placement

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
perturb_file(
    snakemake.input.model,
    snakemake.input.source,
    snakemake.output[0],
    snakemake.params.perturb,  # exactly what re-runs this rule when it changes
    CheckpointKey.from_wildcards(w),  # method: <kind><seed>-<source> or placebo-<source>
    snakemake.input.damage_text,
    Placement.of_job(snakemake.config, w.model, snakemake.threads),
)
