from pathlib import Path

from benchmark_illusion import logs
from benchmark_illusion.concepts.gap_settings import GapSettings
from benchmark_illusion.concepts.steps import build_gaps_database
from benchmark_illusion.metrics import dbfile

logs.to_file(snakemake.log[0])
# results/concepts/{model}/sae: the model is the folder above
fits = {Path(d).parent.name: str(Path(d) / "fit.json") for d in snakemake.input.sae}
build_gaps_database(
    # the rules' inputs and outputs are the databases' stamps
    dbfile.database_of(snakemake.input.db),
    dbfile.database_of(snakemake.output[0]),
    activations=list(snakemake.input.activations),
    tokens=list(snakemake.input.tokens),
    labels=list(snakemake.input.labels),
    sql_files=list(snakemake.input.sql),
    settings=GapSettings(**snakemake.params.gaps),
    sae_fits=fits,
)
