"""The compression stage's file steps: calibration windows, pruning, quantization, and the
floors and controls built from the dense model (perturbation.py). Each takes its rule's params,
a CheckpointKey and a Placement (models/keys.py); the other stages' steps are in their own
`steps.py` (docs/design.md lists where each lives).

A step validates its inputs before any long computation and writes its outputs atomically, so
an interrupted step leaves nothing that looks finished.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from benchmark_illusion.compression import calibration as cal
from benchmark_illusion.compression import damage as dmg
from benchmark_illusion.compression import quantization as quant
from benchmark_illusion.compression.methods import needs_calibration
from benchmark_illusion.compression.names import (
    PLACEBO_SEED,
    describe_checkpoint,
    parse_placebo,
    parse_twin,
)
from benchmark_illusion.compression.perturbation import (
    CONTROL,
    REPORT,
    draw_seed,
    perturb_model,
)
from benchmark_illusion.compression.pruning.layerwise import (
    PruneSettings,
    check_report,
    prune_model,
)
from benchmark_illusion.compression.structures import parse_structure
from benchmark_illusion.io import atomic_path, write_json
from benchmark_illusion.models.checkpoints import (
    DTYPES,
    checkpoint_hash,
    load_checkpoint,
    log_peak_gpu_memory,
    resolve_device,
    where,
    write_checkpoint,
)
from benchmark_illusion.models.keys import CheckpointKey, Placement

log = logging.getLogger("benchmark_illusion")


# ---------------------------------------------------------------- calibration


def calibration_file(
    settings: dict,
    seed: int,
    tokenizer_dir: str | Path,
    out: str | Path,
    *,
    item_files=(),
    selected_files=(),
    draw: str = "calibration",
) -> dict:
    """Cut the configured calibration windows and store them (safetensors, with metadata).

    settings: the rule's params (params.calibration: config `calibration` less its languages).
    draw: 'damage' (the held-out windows the damage is measured on) or 's<seed>' (the
    calibration windows of a replicate's seed); 'calibration': those of `seed`.
    """
    c = settings
    if c["source"] == "heldout_items":
        docs = cal.heldout_passages(list(item_files), list(selected_files))
    elif c["source"] == "text_files":
        docs = cal.text_file_documents(c["paths"])
    else:
        # Enough documents for the windows with a wide margin (C4 documents average ~400 tokens).
        docs = cal.c4_documents(
            c,
            max_docs=max(256, (c["n_windows"] + c["damage_windows"]) * c["seq_len"] // 100),
        )
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    role = "damage" if draw == "damage" else "calibration"
    seed_of_draw = int(draw[1:]) if draw.startswith("s") else None
    windows = cal.make_windows(
        docs,
        tok,
        c["n_windows"],
        c["seq_len"],
        seed,
        draw_seed=seed_of_draw,
        damage_windows=c["damage_windows"],
        role=role,
    )
    meta = {
        "source": c["source"],
        "documents": str(len(docs)),
        "n_windows": str(c["n_windows"]),
        "seq_len": str(c["seq_len"]),
        "seed": str(seed),
        "draw": draw,
        "damage_windows": str(c["damage_windows"]),
    }
    with atomic_path(out, ".safetensors") as tmp:
        save_file({"input_ids": windows}, str(tmp), metadata=meta)
    log.info(
        "calibration %s: %d windows x %d tokens from %d documents (%s)",
        out,
        *windows.shape,
        len(docs),
        c["source"],
    )
    return meta


def load_dense(model_dir, dtype: str, place: Placement, device: str | None = None):
    """(model, tokenizer, device) of the dense checkpoint a compression step starts from, on
    `device` (default: the placement's, resolved), torch on the placement's threads."""
    if place.threads:
        torch.set_num_threads(place.threads)
    device = resolve_device(device or place.device)
    net, tok = load_checkpoint(model_dir, dtype, device, place.trust_remote_code)
    log.info(
        "loaded %s on %s (%d torch threads)", model_dir, where(device), torch.get_num_threads()
    )
    return net, tok, device


# ---------------------------------------------------------------- pruning


def prune_file(
    model_dir: str | Path,
    calibration: str | Path | None,
    out: str | Path,
    params: dict,
    key: CheckpointKey,
    place: Placement | None = None,
) -> dict:
    """Prune the dense checkpoint into `key`'s (method without its replicate seed, structure,
    sparsity) and write checkpoint + sparsity.json (atomically, after checks).

    params: the rule's params (params.prune). place: where and how the dense model is loaded
    (None: Placement()).
    """
    settings = PruneSettings.from_params(params, key.method, key.structure, key.sparsity)
    place = place or Placement()
    net, tok, device = load_dense(model_dir, params["dtype"], place)  # settings checked first
    windows = load_file(str(calibration))["input_ids"] if calibration else None
    report = prune_model(net, windows, settings)
    report["model"] = key.model
    # SparseGPT's weights depend on it (float sums split per thread); magnitude's and Wanda's not
    report["torch_threads"] = torch.get_num_threads()
    report["dense_model_hash"] = checkpoint_hash(model_dir)
    report["tolerance"] = params["tolerance"]
    check_report(report, params["tolerance"])
    write_checkpoint(
        out,
        net,
        tok,
        model_dir,
        "sparsity.json",
        report,
        pruned_from=str(model_dir),
        pruning={k: report[k] for k in ("method", "structure", "target_sparsity")},
    )
    log.info(
        "pruned %s %s %s %g: measured sparsity %.5f in %.1fs",
        key.model,
        key.method,
        key.structure,
        key.sparsity,
        report["measured_sparsity"],
        report["seconds"],
    )
    log_peak_gpu_memory(log, device, "prune")
    return report


# ---------------------------------------------------------------- quantization


def quantize_file(
    model_dir: str | Path,
    calibration: str | Path | None,
    out: str | Path,
    params: dict,
    key: CheckpointKey,
    place: Placement | None = None,
) -> dict:
    """Quantize the dense checkpoint and write checkpoint + quantization.json (atomically, after
    the on-grid check): the dequantized weights in the model's dtype, so evaluation is unchanged.

    params: the rule's params (params.quantize). key.structure: the grid, e.g. int4-g128.
    """
    settings = quant.QuantizeSettings.from_params(params, key.method, key.structure)
    if needs_calibration(key.method) and not calibration:
        raise ValueError(
            f"{key.method} needs calibration windows (the calibration_data rule's output)"
        )
    place = place or Placement()
    net, tok, device = load_dense(model_dir, params["dtype"], place)
    windows = load_file(str(calibration))["input_ids"] if calibration else None
    report = quant.quantize_model(net, windows, settings)
    report["model"] = key.model
    report["torch_threads"] = torch.get_num_threads()  # GPTQ's weights depend on it, RTN's not
    report["dtype"] = params["dtype"]
    report["dense_model_hash"] = checkpoint_hash(model_dir)
    quant.check_report(report)
    write_checkpoint(
        out,
        net,
        tok,
        model_dir,
        "quantization.json",
        report,
        quantized_from=str(model_dir),
        quantization={
            k: report[k] for k in ("method", "structure", "bits", "group_size", "symmetric")
        },
    )
    log.info(
        "quantized %s %s %s: %d groups, at most %d distinct values per group (grid: %d) in %.1fs",
        key.model,
        key.method,
        key.structure,
        report["groups"],
        report["max_distinct_per_group"],
        report["levels"],
        report["seconds"],
    )
    log_peak_gpu_memory(log, device, "quantize")
    return report


# ---------------------------------------------------------------- floors and controls


def _nm_of(structure: str) -> tuple[int, int] | None:
    try:
        st = parse_structure(structure)
    except ValueError:  # a quantization grid or a variant: no mask structure
        return None
    return (st.n, st.m) if st.is_nm else None


def perturb_file(
    model_dir: str | Path,
    source_dir: str | Path,
    out: str | Path,
    params: dict,
    key: CheckpointKey,
    damage_text: str | Path,
    place: Placement | None = None,
) -> dict:
    """Write the twin `key.method` (<kind><seed>-<source>, or the placebo placebo-<source>) of
    the compressed checkpoint in `source_dir` (key.structure and key.sparsity: the source's):
    the dense model in `model_dir` changed as the kind says (perturbation.py), in the checkpoint
    layout (safetensors, tokenizer, provenance.json) with `perturbation.json`, atomically.

    params: the rule's params (params.perturb: the model's dtype). damage_text: the held-out
    windows (safetensors, `input_ids`) the damage is measured on. On the CPU (the noise is
    drawn there), whatever the placement's device: a load of the dense model and of the source,
    their damage, a few forward passes for the scale, and a save. place.threads: torch threads
    (the norms are float64 sums; None: one thread).
    """
    method = key.method
    twin = parse_twin(method)
    placebo = parse_placebo(method)
    if twin is not None:
        kind, seed, source = twin
    elif placebo is not None:
        kind, seed, source = "damage", PLACEBO_SEED, placebo
    else:
        raise ValueError(
            f"{method!r} is no perturbed method "
            "(noise|damage|mask<seed>-<source>, placebo-<source>)"
        )
    place = place or Placement(threads=1)
    if place.threads:
        torch.set_num_threads(place.threads)
    windows = load_file(str(damage_text))["input_ids"]
    # the source's weights only (a compressed checkpoint's tokenizer is the dense model's)
    src_net = AutoModelForCausalLM.from_pretrained(
        source_dir,
        dtype=DTYPES[params["dtype"]],
        trust_remote_code=place.trust_remote_code,
        use_safetensors=True,
    ).eval()
    net, tok, _ = load_dense(model_dir, params["dtype"], place, device="cpu")
    reference = dmg.log_probs(net, windows)
    source_damage = dmg.damage(src_net, windows, reference)
    del src_net
    dense_nll = dmg.damage(net, windows, reference)["nll"]
    draw = draw_seed(seed, source)
    report = perturb_model(
        net,
        source_dir,
        draw,
        kind,
        measure=lambda s: dmg.damage(net, windows, reference),
        source_damage=source_damage,
        nm=_nm_of(key.structure),
    )
    report.update(
        seed=int(seed),  # the twin's seed, as its name spells it; perturb_model's is the draw's
        noise_seed=draw,
        model=key.model,
        method=method,
        source_method=source,
        control="placebo" if placebo is not None else None,
        structure=describe_checkpoint(source, key.structure)[0],  # as the logs spell it
        sparsity=float(key.sparsity),
        dtype=params["dtype"],
        torch_threads=torch.get_num_threads(),
        dense_nll=dense_nll,
        damage_windows=list(windows.shape),
        dense_model_hash=checkpoint_hash(model_dir),
        source_model_hash=checkpoint_hash(source_dir),
        source=str(source_dir),
    )
    write_checkpoint(
        out,
        net,
        tok,
        model_dir,
        REPORT,
        report,
        perturbed_from=str(model_dir),
        perturbation={
            k: report[k] for k in ("seed", "kind", "source_method", "source", "relative_change")
        },
    )
    log.info(
        "perturbed %s like %s (%s, seed %d): %d Linears, scale %.4f, relative change %.6f "
        "(source %.6f), KL %.5f (source %.5f), NLL %.4f (source %.4f, dense %.4f), %d "
        "unchanged, in %.1fs",
        key.model,
        source_dir,
        kind,
        seed,
        report["n_perturbed"],
        report["scale"],
        report["relative_change"],
        report["source_relative_change"],
        report["damage_kl"],
        report["source_damage_kl"],
        report["damage_nll"],
        report["source_damage_nll"],
        dense_nll,
        len(report["unchanged"]),
        report["seconds"],
    )
    if report.get("matched") is False:
        log.warning(
            "%s: the %s twin's damage (KL %.5f) misses the source's (%.5f) by %.1f %%",
            method,
            kind,
            report["damage_kl"],
            report["source_damage_kl"],
            100 * report["match_relative_error"],
        )
    return report


def control_file(model_dir: str | Path, out: str | Path, *, model: str) -> dict:
    """Write the positive control `forbid`: the dense model's files (the weights as hard links
    where the file system allows, everything else copied; hidden files left out) and
    control.json, which tells `evaluate` to forbid each gold's first token in every decode.
    Atomic."""
    report = {
        "model": model,
        "control": "forbid",
        "forbid_gold_first_token": True,
        "damage_kl": 0.0,
        "source_damage_kl": 0.0,
        "dense": str(model_dir),
    }
    with atomic_path(out) as tmp:
        tmp = Path(tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        for f in sorted(Path(model_dir).iterdir()):
            if not f.is_file() or f.name.startswith("."):
                continue  # never a workflow's marker (.snakemake_timestamp): a link would tie
                # the dense model's timestamp to this folder's
            if f.suffix == ".safetensors":
                try:
                    os.link(f, tmp / f.name)  # the weights: a link, not a second copy
                    continue
                except OSError:
                    pass
            shutil.copy2(f, tmp / f.name)
        write_json(report, tmp / CONTROL)
    log.info("control forbid of %s: the dense weights, gold first tokens forbidden", model)
    return report
