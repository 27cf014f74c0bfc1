from pathlib import Path

from benchmark_illusion import logs
from benchmark_illusion.metrics import dbfile
from benchmark_illusion.metrics.steps import make_figures

logs.to_file(snakemake.log[0])
written = make_figures(dbfile.database_of(snakemake.input[0]), Path(snakemake.output[0]).parent)
missing = sorted(set(map(str, snakemake.output)) - set(map(str, written)))
if missing:
    raise RuntimeError(f"figures not written: {missing}")
