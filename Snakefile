# benchmark-illusion: do pruned LLMs lose knowledge, or only stop producing it?
# Data flow and definitions: docs/design.md. Config keys: config/README.md.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/aggregate.smk"


rule all:
    input:
        get_final_output(),
    default_target: True
