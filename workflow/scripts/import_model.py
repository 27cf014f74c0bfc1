import json

from benchmark_illusion import logs, models

log = logs.to_file(snakemake.log[0])
prov = models.import_model(snakemake.params.model, snakemake.output[0])
log.info("imported %s: %s", snakemake.wildcards.model, json.dumps(prov))
