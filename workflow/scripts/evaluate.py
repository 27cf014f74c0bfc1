from benchmark_illusion import logs, pipeline

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
pipeline.evaluate_file(
    snakemake.input.model,
    snakemake.input.item_table,
    snakemake.output[0],
    snakemake.config,  # params.eval only makes config changes re-run this rule
    model=w.model,
    method=w.get("method", "dense"),
    structure=w.get("structure", "none"),
    sparsity=float(w.get("sparsity", 0)),
    dataset=w.dataset,
    lang=w.lang,
    limit=snakemake.params.get("pool_max"),
    threads=snakemake.threads,
    exemplar_items=snakemake.input.get("exemplars"),
)
