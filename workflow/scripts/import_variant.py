import json
from pathlib import Path

from benchmark_illusion import logs
from benchmark_illusion.models import steps

log = logs.to_file(snakemake.log[0])
p = snakemake.params.variant
fetched = snakemake.input.get("fetched")  # a hub variant: the files fetch_hub_variant downloaded
out = steps.import_variant(
    p["base"],
    p["variant"],
    snakemake.output[0],
    snakemake.input.base,
    model=snakemake.wildcards.model,
    name=snakemake.wildcards.variant,
    fetched=json.loads(Path(fetched).read_text()) if fetched else None,
    tolerance=p["tolerance"],
    log=log,
)
w = snakemake.wildcards
log.info("imported variant %s of %s: %s", w.variant, w.model, json.dumps(out))
