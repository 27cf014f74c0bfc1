# benchmark-illusion: do pruned LLMs lose knowledge, or only stop producing it?
# Data flow and definitions: docs/design.md. Config keys: config/README.md.

from datetime import UTC, datetime
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


# The embedded default, only when no --configfile is given: Snakemake would otherwise merge a
# command-line config into it (models and datasets mappings are merged key by key, so a paper
# config would also run the sample model and dataset, and `models: {}` could not be empty).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


# Wildcard patterns of every rule (the names come from the config, through common.smk).
wildcard_constraints:
    model=one_of(MODELS),
    method=f"{PRUNE_METHODS}|{QUANT_METHODS}|{PERTURBED_METHODS}|{VARIANT_METHODS}|{CONTROL_METHODS}",
    structure=f"{PRUNE_STRUCTURES}|{QUANT_STRUCTURES}|{VARIANT_STRUCTURE}",
    sparsity="0|0\\.[0-9]+",
    dataset=one_of(DATASETS),
    lang="[A-Za-z0-9-]+",


include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/prune.smk"
include: "workflow/rules/perturb.smk"
include: "workflow/rules/aggregate.smk"


if CONCEPTS:

    include: "workflow/rules/concepts.smk"


# The run manifest, results/run.json (config, versions, commit, hardware, devices, times, the
# headline numbers; src/benchmark_illusion/manifest.py): written at the end of every invocation
# that rebuilt the database. Jobs run without hooks, so only the main process writes it.
RUN_STARTED = datetime.now(UTC)


onsuccess:
    from benchmark_illusion.manifest import after_run

    after_run(config, RUN_STARTED, Path(workflow.basedir))


rule all:
    default_target: True
    input:
        get_final_output(),
