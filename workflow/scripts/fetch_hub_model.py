from benchmark_illusion import logs
from benchmark_illusion.io import write_json
from benchmark_illusion.models.steps import fetch_hub_model

log = logs.to_file(snakemake.log[0])
record = fetch_hub_model(snakemake.params.model)
write_json(record, snakemake.output[0])
log.info("fetched %s at %s into %s", record["id"], record["commit"], record["snapshot"])
