from benchmark_illusion import logs
from benchmark_illusion.compression.steps import calibration_file

logs.to_file(snakemake.log[0])
calibration_file(
    snakemake.params.calibration,
    snakemake.params.seed,
    snakemake.input.model,
    snakemake.output[0],
    item_files=snakemake.input.get("item_tables", []),
    selected_files=snakemake.input.get("selected", []),
    draw=snakemake.wildcards.draw,
)
