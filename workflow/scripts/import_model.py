import json
from pathlib import Path

from benchmark_illusion import logs
from benchmark_illusion.models.steps import import_model

log = logs.to_file(snakemake.log[0])
cfg = dict(snakemake.params.model)
if snakemake.input:  # a hub model: read the files fetch_hub_model downloaded, offline
    cfg["fetched"] = json.loads(Path(snakemake.input[0]).read_text())
prov = import_model(cfg, snakemake.output[0])
log.info("imported %s: %s", snakemake.wildcards.model, json.dumps(prov))
