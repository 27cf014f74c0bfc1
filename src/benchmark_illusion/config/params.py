"""What each rule passes its script: the config values that decide the rule's outputs.

A rule's `params` are Snakemake's re-run triggers, and its script passes the package exactly
these params (plus where to run: device, threads, trust_remote_code, which never change a
row). A package step therefore cannot read a config key that would not re-run it when
changed; tests/test_pipeline_steps.py runs every step on params that raise on any other key.

Every function takes a schema-validated config (defaults filled in) and returns plain data.
"""

from __future__ import annotations


def _without(section: dict, *keys: str) -> dict:
    return {k: v for k, v in section.items() if k not in keys}


def dataset(config: dict, name: str) -> dict:
    """Dataset `name`, without its language list: adding a language must not re-run the others."""
    return _without(config["datasets"][name], "languages")


def model(config: dict, name: str) -> dict:
    """Model `name`, without params_b (it only sizes cluster jobs), sae (concept rules only)
    and variants (each imported by its own job: adding one must not import the base again)."""
    return _without(config["models"][name], "params_b", "sae", "variants")


def variant(config: dict, model_name: str, name: str) -> dict:
    """What decides the import of variant `name` of model `model_name`: the variant's keys and
    the base's dtype and trust_remote_code (variants.source_config), and pruning.tolerance
    (how far a claimed sparsity may be from the measured one before the log warns)."""
    base = config["models"][model_name]
    return {
        "variant": dict(base["variants"][name]),
        "base": {k: base[k] for k in ("dtype", "trust_remote_code") if k in base},
        "tolerance": config["pruning"]["tolerance"],
    }


# evaluation keys that decide how many rows run together, not what a row holds (like the
# device): left out of the params, so changing them re-runs nothing
THROUGHPUT_KEYS = ("decode_rows", "batch_tokens", "decode_tokens")


def evaluation(config: dict) -> dict:
    """What decides evaluation rows: seed, prompt, judge, evaluation (not where it runs).

    evaluation.engine is a param when it names another engine than the native one (vLLM's
    rows may differ in the last bits of a score, hence in a near-tie); `native` is left out, so
    that results made before the key existed are not re-run.
    """
    e = config["evaluation"]
    drop = ("device", *THROUGHPUT_KEYS) + (("engine",) if e.get("engine") == "native" else ())
    return {
        "seed": config["seed"],
        "prompt": config["prompt"],
        "judge": config["judge"],
        "evaluation": _without(e, *drop),
    }


# formats the selection pool does not run: the selection reads open and mc only, and the
# no-passage control is measured on the selected items (by `evaluate`, the dense model included)
NOT_IN_POOL = ("mc_nopassage",)


def pool_evaluation(config: dict) -> dict:
    """Like `evaluation`, without the recovery settings (the selection pool is never decoded)
    and without the formats of NOT_IN_POOL.

    The dense model is evaluated (and decoded) again on the selected items by `evaluate`, so a
    decoding parameter must not re-run the dense pool and the selection, and neither must
    switching the no-passage control on or off.
    """
    params = evaluation(config)
    params["evaluation"] = _without(params["evaluation"], "recovery")
    formats = params["evaluation"].get("formats")
    if formats is not None:
        params["evaluation"]["formats"] = [f for f in formats if f not in NOT_IN_POOL]
    return params


def calibration(config: dict) -> dict:
    """What changes the calibration windows besides the seed; `languages` acts through the
    input files."""
    return _without(config["calibration"], "languages")


def prune(config: dict, model_name: str, method: str) -> dict:
    """What changes one checkpoint of `method` (calibration acts through its input file).

    The batch size only for methods that read calibration windows, sparsegpt's settings only
    for sparsegpt: a change re-prunes only the checkpoints it affects.
    """
    from benchmark_illusion.compression.methods import needs_calibration
    from benchmark_illusion.compression.names import parse_replicate

    method = parse_replicate(method)[0]  # a replicate <method>-s<seed>: its seed is its input's
    p = config["pruning"]
    params = {"dtype": config["models"][model_name]["dtype"], "tolerance": p["tolerance"]}
    if needs_calibration(method):
        params["batch_size"] = p["batch_size"]
    if method == "sparsegpt":
        params["sparsegpt"] = p["sparsegpt"]
    return params


def quantize(config: dict, model_name: str, method: str) -> dict:
    """What changes one quantized checkpoint besides its grid (the grid is in its path, so a
    new group size or bit width adds checkpoints instead of replacing them): GPTQ's settings
    only for gptq."""
    from benchmark_illusion.compression.names import parse_replicate

    method = parse_replicate(method)[0]
    q = config["quantization"]
    params = {"dtype": config["models"][model_name]["dtype"]}
    if method == "gptq":
        params.update(batch_size=q["batch_size"], gptq=q["gptq"])
    return params


def perturb(config: dict, model_name: str) -> dict:
    """What changes one perturbed twin besides its inputs (the dense model and the compressed
    checkpoint) and its seed (in its path): the model's dtype, which the sum is stored in."""
    return {"dtype": config["models"][model_name]["dtype"]}


def metrics(config: dict) -> dict:
    """Bootstrap settings of the metric tables (a change re-runs only the aggregation)."""
    m = config["metrics"]
    return {
        "seed": config["seed"],
        "bootstrap_replicates": m["bootstrap_replicates"],
        "ci_level": m["ci_level"],
    }


def gaps(config: dict) -> dict:
    """Quantiles, minimum support, stability subsamples and damage tests of the gap tables; the
    damage tests' intervals use the metric tables' level (metrics.ci_level)."""
    return {
        "seed": config["seed"],
        "ci_level": config["metrics"]["ci_level"],
        **config["concepts"]["gaps"],
    }


def sae(config: dict, model_name: str) -> dict:
    """What decides the SAE: its settings, the prompt (item prompts are corpus text), the seed,
    and the pretrained SAE if the model names one. sae.languages acts through the input files."""
    c = config["concepts"]
    return {
        "seed": config["seed"],
        "prompt": config["prompt"],
        "concepts": {
            "layer": c["layer"],
            "sae": _without(c["sae"], "languages"),
            "batch_size": c["batch_size"],
        },
        "pretrained": config["models"][model_name].get("sae"),
    }


def labels(config: dict) -> dict:
    """What decides the labels (the SAE and its corpus act through the input folder)."""
    c = config["concepts"]
    return {"concepts": {"batch_size": c["batch_size"], "labels": c["labels"]}}


def activations(config: dict) -> dict:
    """What decides the per-item activations: the prompt and which of its tokens count."""
    c = config["concepts"]
    return {
        "prompt": config["prompt"],
        "concepts": {"tokens": c["tokens"], "batch_size": c["batch_size"]},
    }
