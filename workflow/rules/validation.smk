# Config validation, before anything reads the config: the schema (types, ranges, enums; Snakemake
# fills in its defaults), then what a schema cannot see (benchmark_illusion.config.validate).

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from benchmark_illusion.config.validate import ConfigError, check_config, schema_errors

try:
    validate(config, "../schemas/config.schema.yaml")
except WorkflowError:
    # Snakemake's message shows one error with the whole schema; list every one by key instead.
    raise ConfigError(
        "invalid config:\n  "
        + "\n  ".join(
            schema_errors(config, workflow.source_path("../schemas/config.schema.yaml"))
        )
    )
check_config(config)
