from benchmark_illusion import logs
from benchmark_illusion.config.params import THROUGHPUT_KEYS
from benchmark_illusion.evaluation.schema import write_empty_log_if_no_items

logs.to_file(snakemake.log[0])
w = snakemake.wildcards
# nothing to evaluate (no item right for the dense model): done before torch is imported
if not write_empty_log_if_no_items(snakemake.input.item_table, snakemake.output[0]):
    from benchmark_illusion import pipeline

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
        # how many rows run together: never changes a row
        throughput={k: snakemake.config["evaluation"][k] for k in THROUGHPUT_KEYS},
        trust_remote_code=snakemake.config["models"][w.model]["trust_remote_code"],
        limit=snakemake.params.get("pool_max"),
        threads=snakemake.threads,
        exemplar_items=snakemake.input.get("exemplars"),
    )
