# Job sizing: memory, runtime, GPU memory and threads of the model jobs, from the model's size
# (benchmark_illusion.scheduling.cluster).

import functools
from pathlib import Path

from snakemake.logging import logger


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
    """GPU memory in MB of a `kind` job of {model} (cluster.job_gpu_memory_mb); 0 on the CPU."""
    from benchmark_illusion.scheduling.cluster import job_gpu_memory_mb

    return job_gpu_memory_mb(
        kind,
        config,
        wildcards.model,
        model_params(wildcards.model)[0],
        model_shape(wildcards.model)[0],
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
