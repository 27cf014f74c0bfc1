import torch

from benchmark_illusion import logs
from benchmark_illusion.concepts.steps import concept_labels_file
from benchmark_illusion.models.checkpoints import resolve_device

logs.to_file(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
concept_labels_file(
    snakemake.input.sae,
    snakemake.input.model,
    snakemake.output[0],
    snakemake.params.config,
    model=snakemake.wildcards.model,
    device=resolve_device(snakemake.config["evaluation"]["device"]),
)
