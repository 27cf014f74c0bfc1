"""The evaluation's file steps (the `evaluate` and `evaluate_pool` rules): one checkpoint on one
item file, log rows out. The other stages' steps are in their own `steps.py` (data,
compression, models, concepts, metrics); docs/design.md lists where each lives.

A step validates its inputs before any long computation and writes its output atomically, so an
interrupted step leaves nothing that looks finished.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import polars as pl
import torch
from transformers import AutoTokenizer

from benchmark_illusion.compression.names import describe_checkpoint
from benchmark_illusion.compression.perturbation import control_of
from benchmark_illusion.config.params import NOT_IN_POOL
from benchmark_illusion.data.steps import seeded_order
from benchmark_illusion.evaluation.engine import NonFiniteError
from benchmark_illusion.evaluation.engines import vllm_here
from benchmark_illusion.evaluation.evaluate import RunMeta, evaluate_items
from benchmark_illusion.evaluation.recovery import recovery_floor
from benchmark_illusion.evaluation.schema import LOG_SCHEMA, write_empty_log_if_no_items
from benchmark_illusion.evaluation.settings import EvalSettings
from benchmark_illusion.io import stable_hash, write_parquet
from benchmark_illusion.models.checkpoints import (
    checkpoint_hash,
    load_checkpoint,
    log_peak_gpu_memory,
    resolve_device,
    where,
)
from benchmark_illusion.models.keys import CheckpointKey, Placement

log = logging.getLogger("benchmark_illusion")


@dataclasses.dataclass(frozen=True)
class EvalJob:
    """One evaluation: `checkpoint` (a folder) on the item table `items` of `dataset`/`lang`,
    the rows to `out`. key: the checkpoint's name in the logs. exemplars: the benchmark's full
    item table, where 1-shot exemplars are looked up (None: `items`). limit: evaluate only the
    first `limit` items in seeded order (the selection pool, which gets no recovery decode:
    the dense model is evaluated again on the selected items, like every other checkpoint)."""

    checkpoint: str | Path
    items: str | Path
    out: str | Path
    key: CheckpointKey
    dataset: str
    lang: str
    exemplars: str | Path | None = None
    limit: int | None = None

    @classmethod
    def from_dict(cls, d: dict) -> EvalJob:
        """The inverse of `to_dict` (a job handed to another Python as JSON)."""
        return cls(**dict(d, key=CheckpointKey(**d["key"])))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}


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
    job: EvalJob,
    params: dict,
    place: Placement | None = None,
    throughput: dict | None = None,
) -> pl.DataFrame:
    """Evaluate one checkpoint on one item file and write the log rows (EvalJob).

    params: the rule's params (params.evaluation or params.pool_evaluation).
    place: where and how the checkpoint is loaded (never changes a row; None: Placement()).
    throughput: EvalSettings fields that set how many rows run together (params.THROUGHPUT_KEYS:
      decode_rows, batch_tokens, decode_tokens; absent: the settings' defaults); like the
      device, they change the speed and the memory, not a decision.
    A NaN or infinite logit or log-probability raises engine.NonFiniteError (naming the
    checkpoint, its path, the step and the items) and `out` is not written.
    """
    checkpoint, key = job.checkpoint, job.key
    place = place or Placement()
    structure, bits = describe_checkpoint(key.method, key.structure)
    items = pl.read_parquet(job.items)
    if job.limit is not None and items.height > job.limit:
        keep = set(seeded_order(items["item_id"].to_list(), params["seed"])[: job.limit])
        items = items.filter(pl.col("item_id").is_in(list(keep)))
    settings = EvalSettings.from_params(params, recovery=job.limit is None)
    if throughput:
        settings = dataclasses.replace(settings, **throughput)
    if items.height == 0 and write_empty_log_if_no_items(job.items, job.out):
        return pl.DataFrame(schema=LOG_SCHEMA)

    # absent from the params: native (params.evaluation leaves the native engine out)
    e = params["evaluation"]
    engine_name = e["engine"] if "engine" in e else "native"
    if engine_name == "vllm" and not vllm_here():
        # vLLM lives in a venv of its own (it pins another transformers): run this step there
        return _evaluate_elsewhere(job, params, place, throughput)
    if place.threads:
        torch.set_num_threads(place.threads)
    device = resolve_device(place.device)
    t0 = time.perf_counter()
    dtype = params["evaluation"]["dtype"]
    if engine_name == "vllm":
        net, tok = vllm_engine(checkpoint, dtype, device, params["seed"], place.trust_remote_code)
    else:
        net, tok = load_checkpoint(checkpoint, dtype, device, place.trust_remote_code)
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
        **dict(dataclasses.asdict(key), structure=structure),
        bits=bits,
        dataset=job.dataset,
        lang=job.lang,
        model_hash=checkpoint_hash(checkpoint),
        config_hash=eval_config_hash(params),
    )
    t0 = time.perf_counter()
    exemplars = None
    if settings.recovery.oneshot:
        table = pl.read_parquet(job.exemplars or job.items)
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
    write_parquet(df, job.out)

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


def vllm_engine(checkpoint, dtype: str, device: str, seed: int, trust_remote_code: bool):
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


def _evaluate_elsewhere(job: EvalJob, params: dict, place: Placement, throughput) -> pl.DataFrame:
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
    if place.threads:
        env["OMP_NUM_THREADS"] = str(place.threads)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), *filter(None, [env.get("PYTHONPATH")])]
    )
    args = dict(
        job=job.to_dict(),
        params=params,
        place=dataclasses.asdict(place),
        throughput=throughput,
    )
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(args, f)
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
            f"the vLLM evaluation of {job.checkpoint} on {job.items} failed "
            f"(exit {done.returncode}; its output is above in this log)"
        )
    return pl.read_parquet(job.out)
