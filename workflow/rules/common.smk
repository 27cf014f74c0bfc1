# Helpers for the rules: config validation, target lists, input functions.
# No lambdas in rules; every function says what it returns.

import functools
import glob
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

from benchmark_illusion.config import params as rule_params
from benchmark_illusion.config.validate import ConfigError, check_config, schema_errors

# torch-free, like everything imported here: every Snakemake process parses this file (two per
# SLURM job), and importing torch would add about a second to each
from benchmark_illusion.compression.structures import (
    STRUCTURE_PATTERN,
    Grid,
    parse_structure,
)
from benchmark_illusion.compression import methods as method_defs
from benchmark_illusion.metrics.figures import names as figure_names
from benchmark_illusion.metrics.figures.names import figure_file
from benchmark_illusion.models import variants as variant_defs

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


def get_dataset_config(wildcards):
    """The config of dataset {dataset}, without its language list (rule_params.dataset)."""
    return rule_params.dataset(config, wildcards.dataset)


def get_raw_input(wildcards):
    """The local file that dataset {dataset}/{lang} is read from (none for hub sources)."""
    from benchmark_illusion.data.raw import raw_path_for

    path = raw_path_for(config["datasets"][wildcards.dataset], wildcards.lang)
    return [path] if path else []


def get_extractive(wildcards):
    """Whether answers of dataset {dataset} must occur in their passage."""
    return config["datasets"][wildcards.dataset]["extractive"]


def get_model_config(wildcards):
    """The config of model {model} that decides its import (rule_params.model)."""
    return rule_params.model(config, wildcards.model)


def get_pool_eval_config(wildcards):
    """What decides the dense pool's rows: no recovery settings (rule_params.pool_evaluation)."""
    return rule_params.pool_evaluation(config)


def get_eval_config(wildcards):
    """What decides evaluation rows (rule_params.evaluation)."""
    return rule_params.evaluation(config)


def checkpoint_folder(model, method, structure, sparsity):
    """Where checkpoint {model}/{method}/{structure}/{sparsity} lives: the imported model for
    method dense, a variant's import for a variant, else the folder its rule writes (prune,
    quantize, or perturb for a twin noise<seed>-<source>)."""
    if method == "dense":
        return f"resources/models/{model}"
    if (
        model,
        method,
    ) in VARIANT_KEYS:  # not its twins (noise<seed>-<name>, the same structure)
        return f"resources/variants/{model}/{method}"
    return f"results/checkpoints/{model}/{method}/{structure}/{sparsity}"


def get_checkpoint(wildcards):
    """The weights `evaluate` loads (checkpoint_folder)."""
    w = wildcards
    return checkpoint_folder(w.model, w.method, w.structure, w.sparsity)


def dense_generation_files():
    """Dense evaluation logs on the selected items, one per model x dataset x lang (the dense
    model through the same `evaluate` rule as every pruned checkpoint, hence its noise floor).
    """
    return [
        f"results/generations/{m}/dense/none/0/{d}/{l}.parquet"
        for m in MODELS
        for d, l in dataset_langs()
    ]


def sparsity_str(s):
    """How a sparsity is spelled in paths: 0.3 -> '0.3', 0.5 -> '0.5'."""
    return f"{s:g}"


def pruning_targets():
    """(method, structure path, sparsity str) of every pruned checkpoint in the grid, one per
    replicate (<method>-s<seed> after the first seed)."""
    from benchmark_illusion.compression.names import replicate_method
    from benchmark_illusion.config.validate import nm_patterns

    p = config["pruning"]
    points = [("unstructured", s) for s in p["sparsities"]]
    for pattern in nm_patterns(p):
        st = parse_structure(pattern)
        points.append((st.path, st.sparsity))
    return [
        (replicate_method(m, seed, method_seeds(m)), st, sparsity_str(s))
        for m in p["methods"]
        for seed in method_seeds(m)
        for st, s in points
    ]


def quantization_targets():
    """(method, grid name, sparsity str '0') of every quantized checkpoint in the grid: every
    method x bit width on the configured grid (e.g. ('gptq', 'int4-g128', '0')), one per
    replicate."""
    from benchmark_illusion.compression.names import replicate_method

    q = config["quantization"]
    return [
        (
            replicate_method(m, seed, method_seeds(m)),
            str(Grid(b, q["group_size"], q["symmetric"])),
            "0",
        )
        for m in q["methods"]
        for seed in method_seeds(m)
        for b in q["bits"]
    ]


def variant_targets(model):
    """(variant name, 'variant', sparsity str) of every variant of {model}."""
    return [
        (v, VARIANT_STRUCTURE, variant_defs.sparsity_key(spec))
        for m, v, spec in VARIANTS
        if m == model
    ]


def compressed_targets(model):
    """(method, structure path, sparsity str) of every compressed checkpoint of {model}: the
    pipeline's pruned and quantized ones and the model's variants."""
    return pruning_targets() + quantization_targets() + variant_targets(model)


def compressed_generation_files():
    """Evaluation logs of every pruned and quantized checkpoint and every variant on the
    selected items."""
    return [
        f"results/generations/{m}/{meth}/{st}/{s}/{d}/{l}.parquet"
        for m in MODELS
        for meth, st, s in compressed_targets(m)
        for d, l in dataset_langs()
    ]


def variant_folders():
    """The variants' imports (their variant.json feeds the `variants` table)."""
    return [f"resources/variants/{m}/{v}" for m, v, _ in VARIANTS]


def perturbation_targets(model):
    """(method, structure path, sparsity str) of every twin of {model}: one per compressed
    checkpoint (variants included), kind of controls.perturbation.match and seed of
    controls.perturbation.seeds (none when it is empty; structure twins of pruned checkpoints
    only), and the placebo (negative control) of every checkpoint of the method
    controls.negative names (its first replicate)."""
    from benchmark_illusion.compression.names import (
        parse_replicate,
        perturbed_method,
        placebo_method,
    )

    pruned = {(m, st, s) for m, st, s in pruning_targets()}
    twins = [
        (perturbed_method(seed, meth, kind), st, s)
        for kind in PERTURBATION["match"]
        for seed in PERTURBATION_SEEDS
        for meth, st, s in compressed_targets(model)
        if kind != "structure" or (meth, st, s) in pruned
    ]
    negative = config["controls"]["negative"]
    placebos = (
        [
            (placebo_method(meth), st, s)
            for meth, st, s in pruning_targets() + quantization_targets()
            if negative is not None
            and meth == negative
            and parse_replicate(meth)[1] is None
        ]
        if PERTURBATION_SEEDS
        else []
    )
    return twins + placebos


def control_targets():
    """(method, structure, sparsity) of the positive control (controls.positive)."""
    return [(CONTROL_METHODS, "none", "0")] if config["controls"]["positive"] else []


def control_generation_files():
    return [
        f"results/generations/{m}/{meth}/{st}/{s}/{d}/{l}.parquet"
        for m in MODELS
        for meth, st, s in control_targets()
        for d, l in dataset_langs()
    ]


def perturbed_checkpoints():
    """The perturbed twins' checkpoint folders (their perturbation.json feeds `checkpoints`)."""
    return [
        f"results/checkpoints/{m}/{meth}/{st}/{s}"
        for m in MODELS
        for meth, st, s in perturbation_targets(m)
    ]


def perturbed_generation_files():
    """Evaluation logs of every perturbed twin on the selected items."""
    return [
        f"results/generations/{m}/{meth}/{st}/{s}/{d}/{l}.parquet"
        for m in MODELS
        for meth, st, s in perturbation_targets(m)
        for d, l in dataset_langs()
    ]


def get_perturbation_source(wildcards):
    """The compressed checkpoint a twin {method} = <kind><seed>-<source> (or the placebo
    placebo-<source>) copies the size or damage of."""
    from benchmark_illusion.compression.names import parse_perturbed, parse_placebo

    twin = parse_perturbed(wildcards.method)
    source = twin[1] if twin else parse_placebo(wildcards.method)
    w = wildcards
    return checkpoint_folder(w.model, source, w.structure, w.sparsity)


def get_perturb_params(wildcards):
    """What changes one perturbed twin besides its inputs and seed (rule_params.perturb)."""
    return rule_params.perturb(config, wildcards.model)


def generation_files():
    """Every evaluation log the aggregation reads."""
    return (
        dense_generation_files()
        + compressed_generation_files()
        + perturbed_generation_files()
        + control_generation_files()
    )


def get_calibration_input(wildcards):
    """Calibration windows of {method}'s replicate (<method>-s<seed>, or the first seed of its
    list); magnitude pruning and RTN need none."""
    from benchmark_illusion.compression.names import parse_replicate

    base, seed = parse_replicate(wildcards.method)
    if not method_defs.needs_calibration(base):
        return []
    if seed is None:
        seed = method_seeds(base)[0]
    return f"results/calibration/{wildcards.model}/s{seed}.safetensors"


def get_damage_text(wildcards):
    """The held-out windows a twin's damage is measured on."""
    return f"results/calibration/{wildcards.model}/damage.safetensors"


def calibration_langs():
    """(dataset, lang) pairs whose held-out passages calibrate (calibration.languages, or all)."""
    only = config["calibration"].get("languages")
    return [(d, l) for d, l in dataset_langs() if only is None or l in only]


def get_calibration_params():
    """What changes the calibration windows (rule_params.calibration)."""
    return rule_params.calibration(config)


def get_calibration_sources(wildcards):
    """Item and selected files that held-out calibration text is drawn from (none otherwise).

    Only the calibration languages: with calibration.languages set, adding another language
    to a dataset does not change the calibration text, so no checkpoint is pruned again.
    """
    if config["calibration"]["source"] != "heldout_items":
        return {"item_tables": [], "selected": []}
    return {
        "item_tables": [
            f"results/items/{d}/{l}.parquet" for d, l in calibration_langs()
        ],
        "selected": [
            f"results/selected/{wildcards.model}/{d}/{l}.parquet"
            for d, l in calibration_langs()
        ],
    }


def get_prune_params(wildcards):
    """What changes one checkpoint (rule_params.prune)."""
    return rule_params.prune(config, wildcards.model, wildcards.method)


def get_quantize_params(wildcards):
    """What changes one quantized checkpoint besides its grid (rule_params.quantize)."""
    return rule_params.quantize(config, wildcards.model, wildcards.method)


def selected_files():
    """Selected-item files, one per model x dataset x lang."""
    return [
        f"results/selected/{m}/{d}/{l}.parquet"
        for m in MODELS
        for d, l in dataset_langs()
    ]


def prefetch_files():
    """What the downloads write: every hub model's and hub variant's files (in the hub cache;
    the record here) and every dataset language (the `prefetch` target)."""
    return (
        [f"resources/hub/{m}.json" for m in HUB_MODELS]
        + [f"resources/hub/{m}/{v}.json" for m, v in HUB_VARIANTS]
        + [f"resources/datasets/{d}/{l}.parquet" for d, l in dataset_langs()]
    )


def get_variant_inputs(wildcards):
    """What a variant's import reads: the base model's import (its tokenizer, to compare) and,
    for a hub variant, the record of its download."""
    inputs = {"base": f"resources/models/{wildcards.model}"}
    if (wildcards.model, wildcards.variant) in HUB_VARIANTS:
        inputs["fetched"] = f"resources/hub/{wildcards.model}/{wildcards.variant}.json"
    return inputs


def get_variant_params(wildcards):
    """What decides a variant's import (rule_params.variant)."""
    return rule_params.variant(config, wildcards.model, wildcards.variant)


def get_variant_source(wildcards):
    """The source keys a hub variant is downloaded from (variants.source_config)."""
    base = config["models"][wildcards.model]
    return variant_defs.source_config(base, base["variants"][wildcards.variant])


def sql_files():
    """The metric definitions, run in name order by the aggregation."""
    return sorted(glob.glob(str(WORKFLOW_DIR / "sql" / "*.sql")))


def item_report_files():
    """build_items reports (rows dropped and why), one per dataset x lang."""
    return [f"results/items/{d}/{l}.report.json" for d, l in dataset_langs()]


def pool_files():
    """Dense evaluations of the selection pools, one per model x dataset x lang."""
    return [
        f"results/pool/{m}/{d}/{l}.parquet" for m in MODELS for d, l in dataset_langs()
    ]


@functools.lru_cache(maxsize=None)
def model_params(model):
    """(parameter count, where it comes from) of {model}, for sizing jobs (read once per run)."""
    from benchmark_illusion.scheduling.cluster import guessed, parameter_count

    n, source = parameter_count(model, config["models"][model], Path("."))
    if guessed(source):
        logger.warning(
            f"WARNING: models.{model}.params_b is not set and no parameter count was found (no "
            f"weights on disk, no hub metadata): its jobs are sized as a {n / 1e9:g}B model. "
            f"Set models.{model}.params_b (billions of parameters)."
        )
    return n, source


def sized(kind, key):
    """A resource function: `key` (mem_mb or runtime) of a `kind` job, from the model's size.

    Grows with the attempt, so a job retried on a cluster asks for more. Sizing rules:
    src/benchmark_illusion/scheduling/cluster.py.
    """
    from benchmark_illusion.scheduling.cluster import job_resources

    def resource(wildcards, attempt):
        dtype = config["models"][wildcards.model].get("dtype", "float32")
        return job_resources(kind, model_params(wildcards.model)[0], dtype, attempt)[
            key
        ]

    return resource


@functools.lru_cache(maxsize=None)
def model_shape(model):
    """(layers, hidden, kv_dim, intermediate, vocab; where from) of {model}, for GPU memory."""
    from benchmark_illusion.scheduling.cluster import model_shape as shape_of

    return shape_of(model, config["models"][model], Path("."))


def gpu_memory(kind, wildcards, attempt):
    """GPU memory in MB of a `kind` job of {model} (cluster.gpu_memory_mb); 0 on the CPU."""
    from benchmark_illusion.scheduling.cluster import gpu_memory_mb

    if config["evaluation"]["device"] == "cpu":
        return 0
    model = config["models"][wildcards.model]
    # evaluation runs in evaluation.dtype; pruning, quantization and concepts in the model's
    dtype = (
        config["evaluation"]["dtype"]
        if kind == "evaluate"
        else model.get("dtype", "float32")
    )
    return gpu_memory_mb(
        kind,
        model_params(wildcards.model)[0],
        dtype,
        model_shape(wildcards.model)[0],
        config["evaluation"],
        config["calibration"],
        attempt,
    )


def gpu_sized(kind):
    """Resources of a GPU job of `kind`: gpu_mem_mb (its estimated GPU memory, which caps how
    many run together with `--resources gpu_mem_mb=<MB>` on one machine), and the SLURM request
    that config `gpu_memory_request` asks for (gres, constraint or gpu_model; none when unset).
    Unpacked into the rule's resources (**gpu_sized(...))."""
    from benchmark_illusion.scheduling.cluster import gpu_request

    spec = config.get("gpu_memory_request")

    def mem(wildcards, attempt):
        return gpu_memory(kind, wildcards, attempt)

    resources = {"gpu_mem_mb": mem}
    if spec:
        key = spec.split(":", 1)[0]

        def request(wildcards, attempt):
            return gpu_request(spec, gpu_memory(kind, wildcards, attempt)).get(key, "")

        resources[key] = request
    return resources


def threads_of(rule):
    """A threads function for the model jobs of `rule` (cluster.job_threads): on a CPU one
    thread per job for the steps whose results barely depend on the thread count (they run
    side by side), else 4, capped at --cores. A profile's set-threads overrides it.
    """
    from benchmark_illusion.scheduling.cluster import job_threads, runs_on_gpu

    gpu = runs_on_gpu(config["evaluation"]["device"])

    def threads(wildcards):
        return job_threads(rule, wildcards.get("method"), gpu)

    return threads


def aggregate_sized(key):
    """A resource function for the aggregation: grows with items x checkpoints."""
    from benchmark_illusion.scheduling.cluster import aggregate_resources

    n = (
        sum(
            1
            + len(compressed_targets(m))
            + len(perturbation_targets(m))
            + len(control_targets())
            for m in MODELS
        )
        * len(dataset_langs())
        * config["items"]["max_per_language"]
    )

    def resource(wildcards, attempt):
        return aggregate_resources(n, attempt)[key]

    return resource


def get_model_sources():
    """Per model, the config keys that locate its weights (source, package, file, path, id)."""
    keys = ("source", "package", "file", "path", "id")
    return {
        m: {k: config["models"][m][k] for k in keys if k in config["models"][m]}
        for m in MODELS
    }


def get_metric_settings():
    """Bootstrap settings of the metric tables (rule_params.metrics)."""
    return rule_params.metrics(config)


CONCEPTS = config["concepts"]["enabled"]
# With concepts on, `aggregate` writes the metric tables to results/metrics.duckdb and
# `competency_gaps` adds the concept tables in results/illusion.duckdb; otherwise `aggregate`
# writes results/illusion.duckdb itself.
METRICS_DB = "results/metrics.duckdb" if CONCEPTS else "results/illusion.duckdb"


def get_final_output():
    """Targets of the default target `all` (the database and the figures; the report is built
    from them)."""
    figures = figure_names.METRIC_FIGURES
    if CONCEPTS:
        figures += figure_names.CONCEPT_FIGURES
    return ["results/illusion.duckdb"] + [figure_file(name) for name in figures]


def get_sae_input(wildcards):
    """The dense model, the item files (their prompts) and the calibration windows, as far as
    concepts.sae.corpus uses them."""
    corpus = config["concepts"]["sae"]["corpus"]
    only = config["concepts"]["sae"].get("languages")
    inputs = {"model": f"resources/models/{wildcards.model}"}
    if "items" in corpus:
        inputs["item_tables"] = [
            f"results/items/{d}/{l}.parquet"
            for d, l in dataset_langs()
            if only is None or l in only
        ]
    if "calibration" in corpus:
        # the calibration windows of the first pruning seed (those of the plain-named checkpoints)
        seed = method_seeds("wanda")[0]
        inputs["calibration"] = (
            f"results/calibration/{wildcards.model}/s{seed}.safetensors"
        )
    return inputs


def get_sae_params(wildcards):
    """What decides the SAE of {model} (rule_params.sae)."""
    return rule_params.sae(config, wildcards.model)


def get_label_params():
    """What decides the labels (rule_params.labels)."""
    return rule_params.labels(config)


def get_activation_params():
    """What decides the per-item activations (rule_params.activations)."""
    return rule_params.activations(config)


def concept_activation_files(suffix=""):
    """Per-item concept activations of every model x benchmark (.tokens: token counts)."""
    return [
        f"results/concepts/{m}/activations/{d}/{l}{suffix}.parquet"
        for m in MODELS
        for d, l in dataset_langs()
    ]


def concept_sql_files():
    """The competency-gap definitions, run in name order."""
    return sorted(glob.glob(str(WORKFLOW_DIR / "sql" / "concepts" / "*.sql")))


def get_gap_settings():
    """Settings of the gap tables (rule_params.gaps)."""
    return rule_params.gaps(config)
