from benchmark_illusion import logs
from benchmark_illusion.config.params import THROUGHPUT_KEYS
from benchmark_illusion.evaluation.schema import write_empty_log_if_no_items

logs.to_file(snakemake.log[0])
# nothing to evaluate (no item right for the dense model): done before torch is imported
if not write_empty_log_if_no_items(snakemake.input.item_table, snakemake.output[0]):
    from benchmark_illusion.evaluation.steps import EvalJob, evaluate_file
    from benchmark_illusion.models.keys import CheckpointKey, Placement

    w = snakemake.wildcards
    evaluate_file(
        EvalJob(
            snakemake.input.model,
            snakemake.input.item_table,
            snakemake.output[0],
            CheckpointKey.from_wildcards(w),
            dataset=w.dataset,
            lang=w.lang,
            exemplars=snakemake.input.get("exemplars"),
            limit=snakemake.params.get("pool_max"),
        ),
        snakemake.params.eval,  # exactly what re-runs this rule when it changes
        # where it runs (the config's device, the job's threads): never changes a row
        Placement.of_job(snakemake.config, w.model, snakemake.threads),
        # how many rows run together: never changes a row
        throughput={k: snakemake.config["evaluation"][k] for k in THROUGHPUT_KEYS},
    )
