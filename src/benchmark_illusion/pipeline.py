"""One function per pipeline step, file in, file out, for the evaluation, pruning and quantization
rules (the data rules' steps are in data/steps.py, which imports no torch; the concept rules' in
concepts/: sae_build.py, activations.py, labels.py and gaps.py; the aggregation's in
metrics/aggregate.py, the figures' in metrics/figures/). Each takes its rule's params.

Each function validates its inputs before any long computation and writes its outputs
atomically, so an interrupted step leaves nothing that looks finished.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import polars as pl
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from benchmark_illusion.compression import calibration as cal
from benchmark_illusion.compression import quantization as quant
from benchmark_illusion.compression.methods import needs_calibration
from benchmark_illusion.compression.names import describe_checkpoint
from benchmark_illusion.compression.perturbation import control_of
from benchmark_illusion.compression.pruning.layerwise import (
    PruneSettings,
    check_report,
    prune_model,
)
from benchmark_illusion.compression.structures import parse_grid, parse_structure
from benchmark_illusion.config.params import NOT_IN_POOL
from benchmark_illusion.data.steps import seeded_order
from benchmark_illusion.evaluation.engine import NonFiniteError
from benchmark_illusion.evaluation.engines import vllm_here
from benchmark_illusion.evaluation.evaluate import RunMeta, evaluate_items
from benchmark_illusion.evaluation.prompts import PromptSettings
from benchmark_illusion.evaluation.recovery import recovery_floor
from benchmark_illusion.evaluation.schema import LOG_SCHEMA, write_empty_log_if_no_items
from benchmark_illusion.evaluation.settings import EvalSettings, RecoverySettings
from benchmark_illusion.io import atomic_path, stable_hash, write_parquet
from benchmark_illusion.models.checkpoints import (
    checkpoint_hash,
    load_checkpoint,
    log_peak_gpu_memory,
    resolve_device,
    where,
    write_checkpoint,
)

log = logging.getLogger("benchmark_illusion")


# ---------------------------------------------------------------- evaluation


def eval_settings(params: dict, recovery: bool = True):
    """EvalSettings from the evaluate rule's params (params.evaluation); recovery decodes off
    when `recovery` is False (the pool's params carry no recovery settings)."""
    p, e, j = params["prompt"], params["evaluation"], params["judge"]
    rec = RecoverySettings(**e["recovery"]) if recovery else RecoverySettings.only()
    return EvalSettings(
        recovery=rec,
        prompt=PromptSettings(
            p["answer_prefix"],
            p["chat_template"],
            p["system_prompt"],
            p["candidates_style"],
            dict(p["template_kwargs"]),
        ),
        formats=tuple(e["formats"]),
        batch_size=e["batch_size"],
        max_new_tokens=e["max_new_tokens"],
        budget_margin=e["budget_margin"],
        max_length_factor=j["max_length_factor"],
        max_length_slack=j["max_length_slack"],
        sentence_slack=j["sentence_slack"],
        seed=params["seed"],
    )


def eval_config_hash(params: dict) -> str:
    """Hash of the params behind the greedy and mc rows (params.evaluation, or the pool's).

    Recovery settings are left out: they only change the recovery rows, whose `decode` and
    `sample` columns say how they were made, and the dense pool is not re-run for them. So are
    the formats the pool leaves out (params.NOT_IN_POOL): their rows are their own, and no other
    row depends on them. The pool and the selected items' evaluation therefore carry the same
    hash.
    """
    e = {k: v for k, v in params["evaluation"].items() if k != "recovery"}
    if "formats" in e:
        e["formats"] = [f for f in e["formats"] if f not in NOT_IN_POOL]
    return stable_hash(
        {
            "prompt": params["prompt"],
            "evaluation": e,
            "judge": params["judge"],
            "seed": params["seed"],
        }
    )


def evaluate_file(
    checkpoint: str | Path,
    items_path: str | Path,
    out: str | Path,
    params: dict,
    *,
    model: str,
    method: str = "dense",
    structure: str = "none",
    sparsity: float = 0.0,
    dataset: str,
    lang: str,
    device: str = "auto",
    trust_remote_code: bool = False,
    limit: int | None = None,
    threads: int | None = None,
    exemplar_items: str | Path | None = None,
    throughput: dict | None = None,
) -> pl.DataFrame:
    """Evaluate one checkpoint on one item file and write the log rows.

    params: the rule's params (params.evaluation or params.pool_evaluation).
    device, trust_remote_code: where and how the checkpoint is loaded (never change a row).
    limit: evaluate only the first `limit` items in seeded order (the selection pool). The pool
      gets no recovery decode: the dense model is evaluated again on the selected items by the
      `evaluate` rule, like every pruned checkpoint, and decoded there.
    threads: CPU threads for torch (None: torch's default).
    exemplar_items: the full item table of the benchmark, where 1-shot exemplars are looked up.
    throughput: EvalSettings fields that set how many rows run together (params.THROUGHPUT_KEYS:
      decode_rows, batch_tokens, decode_tokens; absent: the settings' defaults); like the
      device, they change the speed and the memory, not a decision.
    A NaN or infinite logit or log-probability raises engine.NonFiniteError (naming the
    checkpoint, its path, the step and the items) and `out` is not written.
    """
    structure, bits = describe_checkpoint(method, structure)
    items = pl.read_parquet(items_path)
    if limit is not None and items.height > limit:
        keep = set(seeded_order(items["item_id"].to_list(), params["seed"])[:limit])
        items = items.filter(pl.col("item_id").is_in(list(keep)))
    is_pool = limit is not None
    settings = eval_settings(params, recovery=not is_pool)
    if throughput:
        settings = dataclasses.replace(settings, **throughput)
    if items.height == 0 and write_empty_log_if_no_items(items_path, out):
        return pl.DataFrame(schema=LOG_SCHEMA)

    # absent from the params: native (params.evaluation leaves the native engine out)
    e = params["evaluation"]
    engine_name = e["engine"] if "engine" in e else "native"
    if engine_name == "vllm" and not vllm_here():
        # vLLM lives in a venv of its own (it pins another transformers): run this step there
        return _evaluate_elsewhere(
            dict(
                checkpoint=str(checkpoint),
                items_path=str(items_path),
                out=str(out),
                params=params,
                model=model,
                method=method,
                structure=structure,
                sparsity=sparsity,
                dataset=dataset,
                lang=lang,
                device=device,
                trust_remote_code=trust_remote_code,
                limit=limit,
                threads=threads,
                exemplar_items=None if exemplar_items is None else str(exemplar_items),
                throughput=throughput,
            )
        )
    if threads:
        torch.set_num_threads(threads)
    device = resolve_device(device)
    t0 = time.perf_counter()
    dtype = params["evaluation"]["dtype"]
    if engine_name == "vllm":
        net, tok = _vllm_engine(checkpoint, dtype, device, params["seed"], trust_remote_code)
    else:
        net, tok = load_checkpoint(checkpoint, dtype, device, trust_remote_code)
    control = control_of(checkpoint)
    if control and control.get("forbid_gold_first_token"):
        # the positive control: every decode forbidden each gold's first token, mc untouched
        settings = dataclasses.replace(settings, forbid_gold_first_token=True)
        log.info("control %s: each gold's first tokens forbidden in every decode", checkpoint)
    log.info(
        "loaded %s on %s in %.1fs (%d torch threads), %s engine",
        checkpoint,
        where(device),
        time.perf_counter() - t0,
        torch.get_num_threads(),
        engine_name,
    )
    meta = RunMeta(
        model=model,
        method=method,
        structure=structure,
        sparsity=sparsity,
        bits=bits,
        dataset=dataset,
        lang=lang,
        model_hash=checkpoint_hash(checkpoint),
        config_hash=eval_config_hash(params),
    )
    t0 = time.perf_counter()
    exemplars = None
    if settings.recovery.oneshot:
        table = pl.read_parquet(exemplar_items or items_path)
        exemplars = {r["item_id"]: r for r in table.to_dicts()}
    try:
        df = evaluate_items(net, tok, items, settings, meta, exemplars=exemplars)
    except NonFiniteError as err:  # raised before any row is written: `out` is left as it was
        err.checkpoint = f"{err.checkpoint}, read from {checkpoint}"
        raise
    finally:
        if engine_name == "vllm":
            net.close()
    dt = time.perf_counter() - t0
    write_parquet(df, out)

    is_recovery = (pl.col("decode") != "greedy") | (pl.col("format") == "oneshot")
    floor = pl.when(is_recovery).then(recovery_floor(settings)).otherwise(settings.max_new_tokens)
    raised = df.filter(pl.col("max_new_tokens") > floor)
    if raised.height:
        log.info(
            "generation budget raised above the config for %d rows (%d items) "
            "so that the longest gold fits (evaluation.budget_margin %d): up to %d new tokens",
            raised.height,
            raised["item_id"].n_unique(),
            settings.budget_margin,
            raised["max_new_tokens"].max(),
        )
    acc = (
        df.filter(pl.col("decode").is_in(["greedy", "loglik"]))
        .group_by("format")
        .agg(pl.col("correct").mean())
        .sort("format")
        .to_dicts()
    )
    log.info(
        "evaluated %d items in %.1fs (%.2f items/s); accuracy %s",
        items.height,
        dt,
        items.height / max(dt, 1e-9),
        acc,
    )
    log_peak_gpu_memory(log, device, "evaluate")
    return df


def _vllm_engine(checkpoint, dtype: str, device: str, seed: int, trust_remote_code: bool):
    """The vLLM engine on `checkpoint` and its tokenizer (the stop rule from the tokenizer and
    the folder's generation config, as the native engine takes it from the loaded model's)."""
    import types

    from transformers import GenerationConfig

    from benchmark_illusion.evaluation.decoding import stop_rule
    from benchmark_illusion.evaluation.engines.vllm_engine import VllmEngine

    tok = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=trust_remote_code)
    try:
        gen = GenerationConfig.from_pretrained(checkpoint)
    except OSError:
        gen = None
    stop = stop_rule(types.SimpleNamespace(generation_config=gen), tok)
    eng = VllmEngine(
        checkpoint,
        stop,
        dtype=dtype,
        device=device,
        seed=seed,
        trust_remote_code=trust_remote_code,
    )
    return eng, tok


def _evaluate_elsewhere(kwargs: dict) -> pl.DataFrame:
    """Run evaluate_file in the vLLM venv (engines.vllm_python), its output into this step's
    log; return the rows it wrote. The step's thread count becomes vLLM's OpenMP threads."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from benchmark_illusion.evaluation.engines import missing_vllm_message, vllm_python

    py = vllm_python()
    if py is None:
        raise RuntimeError(missing_vllm_message())
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # jobs side by side: no pinning
    if kwargs.get("threads"):
        env["OMP_NUM_THREADS"] = str(kwargs["threads"])
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), *filter(None, [env.get("PYTHONPATH")])]
    )
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(kwargs, f)
    log.info("evaluation.engine vllm: running this step in %s", py)
    try:
        stream = sys.stderr if hasattr(sys.stderr, "fileno") else None
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):
            stream = None
        if stream is not None:
            stream.flush()
        done = subprocess.run(
            [py, "-m", "benchmark_illusion.evaluation.engines.vllm_job", f.name],
            env=env,
            stdout=stream,
            stderr=stream,
        )
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise RuntimeError(
            f"the vLLM evaluation of {kwargs['checkpoint']} on {kwargs['items_path']} failed "
            f"(exit {done.returncode}; its output is above in this log)"
        )
    return pl.read_parquet(kwargs["out"])


# ---------------------------------------------------------------- pruning


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
    draw_seed = int(draw[1:]) if draw.startswith("s") else None
    windows = cal.make_windows(
        docs,
        tok,
        c["n_windows"],
        c["seq_len"],
        seed,
        draw_seed=draw_seed,
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


def _load_for_compression(model_dir, calibration, dtype, device, trust_remote_code, threads):
    """(model, tokenizer, calibration windows or None, device) for a prune or quantize step."""
    if threads:
        torch.set_num_threads(threads)
    device = resolve_device(device)
    net, tok = load_checkpoint(model_dir, dtype, device, trust_remote_code)
    log.info(
        "loaded %s on %s (%d torch threads)", model_dir, where(device), torch.get_num_threads()
    )
    windows = load_file(str(calibration))["input_ids"] if calibration else None
    return net, tok, windows, device


def prune_settings(params: dict, method: str, structure: str, sparsity: float):
    """PruneSettings for one grid point from the prune rule's params (params.prune: the batch
    size only for methods with calibration data, sparsegpt's settings only for sparsegpt);
    raises ValueError for an inconsistent combination."""
    kwargs = {}
    if needs_calibration(method):
        kwargs["batch_size"] = params["batch_size"]
    if method == "sparsegpt":
        kwargs.update(
            blocksize=params["sparsegpt"]["blocksize"], percdamp=params["sparsegpt"]["percdamp"]
        )
    return PruneSettings(
        method=method, sparsity=sparsity, structure=parse_structure(structure), **kwargs
    )


def prune_file(
    model_dir: str | Path,
    calibration: str | Path | None,
    out: str | Path,
    params: dict,
    *,
    model: str,
    method: str,
    structure: str,
    sparsity: float,
    device: str = "auto",
    trust_remote_code: bool = False,
    threads: int | None = None,
) -> dict:
    """Prune the dense checkpoint and write checkpoint + sparsity.json (atomically, after checks).

    params: the rule's params (params.prune). device, trust_remote_code: where and how the
    dense model is loaded.
    """
    settings = prune_settings(params, method, structure, sparsity)  # fails before any work
    net, tok, windows, device = _load_for_compression(
        model_dir, calibration, params["dtype"], device, trust_remote_code, threads
    )
    report = prune_model(net, windows, settings)
    report["model"] = model
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
        model,
        method,
        structure,
        sparsity,
        report["measured_sparsity"],
        report["seconds"],
    )
    log_peak_gpu_memory(log, device, "prune")
    return report


# ---------------------------------------------------------------- quantization


def quantize_settings(params: dict, method: str, structure: str) -> quant.QuantizeSettings:
    """QuantizeSettings for one grid point from the quantize rule's params (params.quantize:
    GPTQ's settings only for gptq) and the grid its structure names; raises ValueError."""
    kwargs = {}
    if method == "gptq":
        g = params["gptq"]
        kwargs.update(
            batch_size=params["batch_size"],
            blocksize=g["blocksize"],
            percdamp=g["percdamp"],
            act_order=g["act_order"],
            static_groups=g["static_groups"],
        )
    return quant.QuantizeSettings(method, parse_grid(structure), **kwargs)


def quantize_file(
    model_dir: str | Path,
    calibration: str | Path | None,
    out: str | Path,
    params: dict,
    *,
    model: str,
    method: str,
    structure: str,
    device: str = "auto",
    trust_remote_code: bool = False,
    threads: int | None = None,
) -> dict:
    """Quantize the dense checkpoint and write checkpoint + quantization.json (atomically, after
    the on-grid check): the dequantized weights in the model's dtype, so evaluation is unchanged.

    params: the rule's params (params.quantize). structure: the grid, e.g. int4-g128.
    """
    settings = quantize_settings(params, method, structure)  # fails before any work
    if method == "gptq" and not calibration:
        raise ValueError("gptq needs calibration windows (the calibration_data rule's output)")
    net, tok, windows, device = _load_for_compression(
        model_dir, calibration, params["dtype"], device, trust_remote_code, threads
    )
    report = quant.quantize_model(net, windows, settings)
    report["model"] = model
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
        model,
        method,
        structure,
        report["groups"],
        report["max_distinct_per_group"],
        report["levels"],
        report["seconds"],
    )
    log_peak_gpu_memory(log, device, "quantize")
    return report
