from benchmark_illusion import logs
from benchmark_illusion.compression import perturbation

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
perturbation.perturb_file(
    snakemake.input.model,
    snakemake.input.source,
    snakemake.output[0],
    snakemake.params.perturb,  # exactly what re-runs this rule when it changes
    model=w.model,
    method=w.method,  # <kind><seed>-<source> or placebo-<source>
    structure=w.structure,
    sparsity=float(w.sparsity),
    damage_text=snakemake.input.damage_text,
    trust_remote_code=snakemake.config["models"][w.model]["trust_remote_code"],
    threads=snakemake.threads,
)
