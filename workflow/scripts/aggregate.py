from benchmark_illusion import logs
from benchmark_illusion.metrics import dbfile
from benchmark_illusion.metrics.aggregate import MetricSettings
from benchmark_illusion.metrics.steps import build_database

logs.to_file(snakemake.log[0])
build_database(
    dbfile.database_of(snakemake.output[0]),  # the rule's output is the database's stamp
    generations=list(snakemake.input.generations),
    selected=list(snakemake.input.selected),
    pool=list(snakemake.input.pool),
    sql_files=list(snakemake.input.sql),
    settings=MetricSettings(**snakemake.params.metrics),
    item_reports=list(snakemake.input.item_reports),
    perturbation_reports=list(snakemake.input.perturbations),
    variant_reports=list(snakemake.input.variants),
    model_sources=snakemake.params.model_sources,
)
