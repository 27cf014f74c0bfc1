import torch

from benchmark_illusion import logs
from benchmark_illusion.concepts.steps import build_sae
from benchmark_illusion.models.checkpoints import resolve_device

logs.to_file(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p = snakemake.params.config  # exactly what decides the SAE (a change re-runs this rule)
build_sae(
    snakemake.input.model,
    snakemake.output[0],
    p,
    item_files=snakemake.input.get("item_tables", []),
    calibration=snakemake.input.get("calibration") or None,
    pretrained=p["pretrained"],
    device=resolve_device(snakemake.config["evaluation"]["device"]),
)
