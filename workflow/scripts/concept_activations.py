import torch

from benchmark_illusion import logs
from benchmark_illusion.concepts.steps import concept_activations_file
from benchmark_illusion.models.checkpoints import resolve_device

logs.to_file(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
w = snakemake.wildcards
concept_activations_file(
    snakemake.input.sae,
    snakemake.input.model,
    snakemake.input.item_table,
    snakemake.output.activations,
    snakemake.output.tokens,
    snakemake.params.config,
    model=w.model,
    dataset=w.dataset,
    lang=w.lang,
    device=resolve_device(snakemake.config["evaluation"]["device"]),
)
