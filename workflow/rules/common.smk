# Helpers for the rules, by concern: validation.smk (the config, checked first), the names and
# wildcard patterns below, targets.smk (the files the rules write and read), inputs.smk (input
# functions and rule params), resources.smk (job sizes and threads).
# No lambdas in rules; every function says what it returns. Everything these files import is
# torch-free: every Snakemake process parses them (two per SLURM job), and importing torch would
# add about a second to each.


include: "validation.smk"


import re
from pathlib import Path

from benchmark_illusion.compression import methods as method_defs
from benchmark_illusion.compression.structures import STRUCTURE_PATTERN
from benchmark_illusion.metrics import dbfile
from benchmark_illusion.models import variants as variant_defs

# This repository's workflow/ folder, from this file's own location: also right when the workflow
# is used as a module of another one (workflow.basedir is then the calling workflow's folder).
WORKFLOW_DIR = Path(str(workflow.current_basedir)).parent


def one_of(names):
    """A wildcard regex matching exactly these names (never matching when there are none)."""
    return "|".join(map(re.escape, names)) or "(?!)"


MODELS = sorted(config["models"])
HUB_MODELS = sorted(m for m in MODELS if config["models"][m]["source"] == "hub")
FILE_MODELS = sorted(m for m in MODELS if m not in HUB_MODELS)
DATASETS = sorted(config["datasets"])
# Compressed variants made elsewhere (models.<model>.variants.<name>; benchmark_illusion.models.variants):
# evaluated as the checkpoint {model}/{name}/variant/{its sparsity key}.
VARIANTS = variant_defs.variants(config)  # (model, name, variant config)
VARIANT_NAMES = sorted({v for _, v, _ in VARIANTS})
VARIANT_KEYS = {(m, v) for m, v, _ in VARIANTS}
VARIANT_STRUCTURE = variant_defs.STRUCTURE
HUB_VARIANTS = sorted((m, v) for m, v, spec in VARIANTS if spec["source"] == "hub")


# Checkpoint wildcards, one place for the rules: {method}/{structure} of a pruned or a quantized
# checkpoint (a quantized one's {sparsity} is 0; its structure names the grid, e.g. int4-g128).
REPLICATE = "(?:-s(?:0|[1-9][0-9]*))?"  # <method>-s<seed>: a replicate (pruning.seeds)
PRUNE_METHODS = f"(?:{'|'.join(method_defs.PRUNE_METHODS)}){REPLICATE}"
PRUNE_STRUCTURES = "unstructured|[0-9]+of[0-9]+"
QUANT_METHODS = f"(?:{'|'.join(method_defs.QUANT_METHODS)}){REPLICATE}"
QUANT_STRUCTURES = STRUCTURE_PATTERN
VARIANT_METHODS = one_of(VARIANT_NAMES)
# A twin of a pruned or quantized checkpoint or a variant: <kind><seed>-<source method> (noise,
# damage, mask), with the source's structure and sparsity; a placebo (the negative control):
# placebo-<source method> (benchmark_illusion.compression.perturbation). No other method starts
# with a letter run followed by digits and '-' (a variant's name may not: config check), so the
# patterns stay disjoint.
SOURCE_METHODS = f"(?:{PRUNE_METHODS}|{QUANT_METHODS}|{VARIANT_METHODS})"
PERTURBED_METHODS = (
    f"(?:noise|damage|mask)(?:0|[1-9][0-9]*)-{SOURCE_METHODS}|placebo-{SOURCE_METHODS}"
)
CONTROL_METHODS = (
    "forbid"  # the positive control: the dense weights, gold first tokens forbidden
)
PERTURBATION = config["controls"]["perturbation"]
PERTURBATION_SEEDS = PERTURBATION["seeds"]


def method_seeds(method):
    """The calibration seeds of `method`'s replicates (pruning.seeds / quantization.seeds, null:
    [seed]); methods without calibration get one replicate."""
    section = "quantization" if method_defs.is_quantization(method) else "pruning"
    seeds = config[section].get("seeds") or [config["seed"]]
    return seeds if method_defs.needs_calibration(method) else seeds[:1]


def dataset_langs():
    """(dataset, lang) pairs of the config."""
    return [(d, l) for d in DATASETS for l in config["datasets"][d]["languages"]]


def sparsity_str(s):
    """How a sparsity is spelled in paths: 0.3 -> '0.3', 0.5 -> '0.5'."""
    return f"{s:g}"


CONCEPTS = config["concepts"]["enabled"]
# With concepts on, `aggregate` writes the metric tables to results/metrics.duckdb and
# `competency_gaps` adds the concept tables in results/illusion.duckdb; otherwise `aggregate`
# writes results/illusion.duckdb itself.
METRICS_DB = "results/metrics.duckdb" if CONCEPTS else "results/illusion.duckdb"
# The rules declare each database's stamp (results/<name>.published.json), not the database:
# Snakemake deletes a declared output before its job runs and when it fails, and the file users
# open must stay in place until the new one replaces it (dbfile.py). A stamp whose database was
# deleted is dropped here, so that the database is built again.
METRICS_STAMP = str(dbfile.stamp_path(METRICS_DB))
ILLUSION_STAMP = str(dbfile.stamp_path("results/illusion.duckdb"))
for _db in {METRICS_DB, "results/illusion.duckdb"}:
    dbfile.drop_stale_stamp(_db)


include: "targets.smk"
include: "inputs.smk"
include: "resources.smk"
