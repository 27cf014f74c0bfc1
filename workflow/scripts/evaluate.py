from benchmark_illusion import logs, pipeline

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
pipeline.evaluate_file(
    snakemake.input.model,
    snakemake.input.item_table,
    snakemake.output[0],
    snakemake.params.eval,  # exactly what re-runs this rule when it changes
    model=w.model,
    method=w.get("method", "dense"),
    structure=w.get("structure", "none"),
    sparsity=float(w.get("sparsity", 0)),
    dataset=w.dataset,
    lang=w.lang,
    device=snakemake.config["evaluation"]["device"],  # where it runs: never changes a row
    decode_rows=snakemake.config["evaluation"]["decode_rows"],  # how many rows decode at once
    trust_remote_code=snakemake.config["models"][w.model]["trust_remote_code"],
    limit=snakemake.params.get("pool_max"),
    threads=snakemake.threads,
    exemplar_items=snakemake.input.get("exemplars"),
)
