# Input functions and params of the rules: what one job reads and what decides its output
# (benchmark_illusion.config.params).

from benchmark_illusion.config import params as rule_params


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


def get_gap_settings():
    """Settings of the gap tables (rule_params.gaps)."""
    return rule_params.gaps(config)
