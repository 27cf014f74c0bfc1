"""What a run will cost, before it starts: time the configured model on a few items, then scale.

`python -m benchmark_illusion estimate [--configfile X]` loads each configured model (its
imported checkpoint under resources/models/ when there is one, else its source), takes a few
items of its first benchmark and language in seeded order, and times, per item:
  open+mc     the `open` prompt's prefill, gold ranks, MC options and the greedy answer
  candidates  the options-shown prompt, greedy
  mc_nopassage  the mc options on the prompt without the passage (when listed; `evaluate` only)
  beam        evaluation.recovery.num_beams beams        (when on)
  sample      evaluation.recovery.num_samples samples    (when on)
  oneshot     the 1-shot prompt, greedy                  (when on)
and each configured pruning and quantization method on its first decoder block with the
configured calibration windows (times the number of blocks).

It then counts the jobs the DAG will run and multiplies:
  evaluate_pool  per benchmark language: min(pool_max, items available) x (open+mc, candidates)
  evaluate       per checkpoint (dense included) and language: the expected selected items
                 (pool x the share the dense model got right in open and mc on the timed items,
                 capped at max_per_language) x every format, plus the recovery decodes on the
                 items their scope names (scope all: every selected item; mc_only/open_wrong:
                 at most every selected item, an upper bound)
  prune          per model, method and sparsity: the timed block x the number of blocks
  quantize       per model, method and bit width: the timed block (at the first bit width)
                 x the number of blocks
Rules not timed here (SAE, concept rules, aggregation, figures) are listed as such.

Each part is timed at the thread count its job gets here (cluster.job_threads, capped at the
cores: one thread for evaluation, magnitude, Wanda and RTN; more for SparseGPT and GPTQ).
Wall time: locally the jobs share `cores` (a job holds as many cores as it has threads); on
SLURM every job of a rule runs at once up to the profile's `jobs`, at the measured per-job
speed (a GPU node is faster: the estimate is then an upper bound), one rule after the other
along the DAG (pool, prune, quantize, evaluate).
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl
import torch
import yaml

from benchmark_illusion.compression.blockwise import decoder_layers
from benchmark_illusion.compression.calibration import CalibrationError, make_windows
from benchmark_illusion.compression.pruning.layerwise import PruneSettings, prune_model
from benchmark_illusion.compression.quantization import Grid, QuantizeSettings, quantize_model
from benchmark_illusion.config import params as rule_params
from benchmark_illusion.data.items import build_items, validate_rows
from benchmark_illusion.data.loaders import load_raw
from benchmark_illusion.data.raw import raw_path_for
from benchmark_illusion.data.steps import seeded_order
from benchmark_illusion.evaluation.decoding import RowContext, Tokens, stop_rule
from benchmark_illusion.evaluation.evaluate import RunMeta, evaluate_items
from benchmark_illusion.evaluation.recovery import recovery_rows
from benchmark_illusion.evaluation.settings import EvalSettings, RecoverySettings
from benchmark_illusion.models.checkpoints import load_checkpoint
from benchmark_illusion.models.steps import import_model
from benchmark_illusion.scheduling.cluster import job_threads

PARTS = ("open+mc", "candidates", "mc_nopassage", "beam", "sample", "oneshot")


@dataclass
class Timing:
    """Measured on `n_items` items with `threads` torch threads (an evaluation job's): seconds
    per item per part, prompt tokens per item, the dense model's share right in open and mc,
    and seconds per pruned or quantized checkpoint per method (its first decoder block pruned
    or quantized on the configured calibration windows, times the number of blocks) at
    `compress_threads[method]` threads (that method's job's)."""

    model: str
    n_items: int
    threads: int
    per_item: dict[str, float] = field(default_factory=dict)
    prompt_tokens: float = 0.0
    kept_share: float = 0.0
    prune: dict[str, float] = field(default_factory=dict)  # seconds per checkpoint
    quantize: dict[str, float] = field(default_factory=dict)  # seconds per checkpoint
    compress_threads: dict[str, int] = field(default_factory=dict)  # per prune/quantize method


@dataclass
class RuleCost:
    rule: str
    jobs: int
    items: int  # item evaluations (0 for prune)
    tokens: int  # prompt tokens through the model (0 for prune)
    cpu_seconds: float  # the jobs' run times added up
    longest_job: float
    core_seconds: float = 0.0  # each job's run time x the cores it holds (its threads)


def _load(name: str, cfg: dict, root: Path, tmp: Path):
    """The imported checkpoint under resources/models/ if the pipeline made it, else the model
    imported here into `tmp` the way the import rule does."""
    imported = root / "resources" / "models" / name
    if not any(imported.glob("*.safetensors")):
        imported = tmp / name
        import_model(cfg, imported)
    return load_checkpoint(
        imported, cfg.get("dtype", "float32"), trust_remote_code=cfg.get("trust_remote_code", False)
    )


def _items(config: dict, root: Path) -> tuple[pl.DataFrame, str, str]:
    """Items of the first benchmark and language: built ones if present, else built here."""
    dataset = sorted(config["datasets"])[0]
    lang = config["datasets"][dataset]["languages"][0]
    built = root / "results" / "items" / dataset / f"{lang}.parquet"
    if built.is_file():
        return pl.read_parquet(built), dataset, lang
    ds = rule_params.dataset(config, dataset)
    raw = load_raw(ds, lang)
    good, _ = validate_rows(raw, extractive=True)
    items, _ = build_items(good, seed=config["seed"], distractors=config["items"]["distractors"])
    return items, dataset, lang


def measure(
    config: dict, root: Path, n_items: int | None = None, cores: int | None = None
) -> list[Timing]:
    """Time every configured model on n_items items per part (default: one batch,
    evaluation.batch_size; fewer items would leave each batch's fixed cost on too few) and a
    one-block prune per method, each at its job's thread count here (capped at `cores`). An
    untimed first evaluation warms the model up."""
    cores = cores or os.cpu_count() or 1
    before = torch.get_num_threads()
    try:
        return _measure(config, root, n_items, cores)
    finally:
        torch.set_num_threads(before)


def _threads(rule: str, cores: int, method: str | None = None) -> int:
    """The torch threads of a CPU `rule` job here, set for timing it; returned."""
    n = min(cores, job_threads(rule, method, gpu=False))
    torch.set_num_threads(n)
    return n


def _measure(config: dict, root: Path, n_items: int | None, cores: int) -> list[Timing]:
    n_items = n_items or config["evaluation"]["batch_size"]
    items, dataset, lang = _items(config, root)
    keep = seeded_order(items["item_id"].to_list(), config["seed"])[:n_items]
    sample = items.filter(pl.col("item_id").is_in(keep))
    exemplars = {r["item_id"]: r for r in items.to_dicts()}
    settings = EvalSettings.from_params(rule_params.evaluation(config))
    rec = settings.recovery
    out = []
    for name in sorted(config["models"]):
        with tempfile.TemporaryDirectory() as tmp:
            model, tok = _load(name, config["models"][name], root, Path(tmp))
        t = Timing(name, sample.height, _threads("evaluate", cores))
        meta = RunMeta(name, dataset=dataset, lang=lang)
        warm = replace(settings, formats=("open", "mc"), recovery=RecoverySettings.only())
        evaluate_items(model, tok, sample.head(1), warm, meta, progress=False)
        parts = [("open+mc", ("open", "mc")), ("candidates", ("candidates",))]
        if "mc_nopassage" in settings.formats:
            parts.append(("mc_nopassage", ("mc_nopassage",)))
        for part, formats in parts:
            s = replace(settings, formats=formats, recovery=RecoverySettings.only())
            t0 = time.perf_counter()
            log = evaluate_items(model, tok, sample, s, meta, progress=False)
            t.per_item[part] = (time.perf_counter() - t0) / sample.height
            if part == "open+mc":
                opened = log.filter(pl.col("format") == "open")
                t.prompt_tokens = float(opened["n_prompt_tokens"].mean())
                right = {
                    f: set(log.filter((pl.col("format") == f) & pl.col("correct"))["item_id"])
                    for f in ("open", "mc")
                }
                t.kept_share = len(right["open"] & right["mc"]) / sample.height
        toks = Tokens(tok, settings.prompt)
        stop = stop_rule(model, tok)
        base = dict(model=name, dataset=dataset, lang=lang)
        rows = sample.to_dicts()
        for part, on in (("beam", rec.beam), ("sample", rec.sample), ("oneshot", rec.oneshot)):
            if not on:
                continue
            only = replace(
                rec,
                beam=part == "beam",
                sample=part == "sample",
                oneshot=part == "oneshot",
                scope="all",
            )
            t0 = time.perf_counter()
            ctx = RowContext(toks, replace(settings, recovery=only), base)
            recovery_rows(model, ctx, rows, stop=stop, exemplars=exemplars, progress=False)
            t.per_item[part] = (time.perf_counter() - t0) / sample.height
        cal = config["calibration"]
        windows = _windows(items, tok, cal["n_windows"], cal["seq_len"], config["seed"])
        n_layers = len(decoder_layers(model))
        for method in config["pruning"]["methods"]:
            p = rule_params.prune(config, name, method)
            sparsity = (config["pruning"]["sparsities"] or [0.5])[0]
            ps = PruneSettings.from_params(p, method, "unstructured", sparsity)
            t.compress_threads[method] = _threads("prune", cores, method)
            t.prune[method] = _first_layer_seconds(model, windows, ps) * n_layers
        q = config["quantization"]
        for method in q["methods"] if q["bits"] else []:
            grid = Grid(q["bits"][0], q["group_size"], q["symmetric"])
            qs = QuantizeSettings.from_params(
                rule_params.quantize(config, name, method), method, str(grid)
            )
            t.compress_threads[method] = _threads("quantize", cores, method)
            t.quantize[method] = _first_layer_seconds(model, windows, qs) * n_layers
        out.append(t)
    return out


def _windows(items: pl.DataFrame, tok, n: int, seq_len: int, seed: int) -> torch.Tensor:
    """Calibration windows of the configured shape cut from the items' passages, repeated when
    they are too short (only the shape matters for timing)."""
    docs = sorted(set(items["context"].to_list()))
    while True:
        try:
            return make_windows(docs, tok, n, seq_len, seed=seed)
        except CalibrationError:
            docs = docs * 2


def _first_layer_seconds(model, windows, settings) -> float:
    """Seconds to prune (PruneSettings) or quantize (QuantizeSettings) a copy of the model cut to
    its first decoder block."""
    work = copy.deepcopy(model)
    del decoder_layers(work)[1:]
    work.config.num_hidden_layers = 1
    t0 = time.perf_counter()
    if isinstance(settings, QuantizeSettings):
        quantize_model(work, windows, settings, progress=False)
    else:
        prune_model(work, windows, settings, progress=False)
    return time.perf_counter() - t0


def _checkpoints(config: dict, model: str | None = None) -> int:
    """Checkpoints of `model` evaluated per benchmark: dense, every pruned and every quantized
    one and the model's variants made elsewhere, and each of those once more per perturbation
    seed (its perturbed twin)."""
    pr, q = config["pruning"], config["quantization"]
    seeds = ((config.get("controls") or {}).get("perturbation") or {}).get("seeds") or []
    compressed = len(pr["methods"]) * (len(pr["sparsities"]) + len(pr.get("nm") or [])) + len(
        q["methods"]
    ) * len(q["bits"])
    compressed += len(((config.get("models") or {}).get(model) or {}).get("variants") or {})
    return 1 + compressed * (1 + len(seeds))


def plan(
    config: dict, timings: list[Timing], languages_items: dict[tuple[str, str], int]
) -> list[RuleCost]:
    """The cost of each timed rule. languages_items: (dataset, lang) -> items available."""
    ev = config["evaluation"]
    rec = ev["recovery"]
    it = config["items"]
    pool_formats = ["open+mc"] + (["candidates"] if "candidates" in ev["formats"] else [])
    decodes = [p for p in ("beam", "sample", "oneshot") if rec.get(p)]
    costs = {
        r: RuleCost(r, 0, 0, 0, 0.0, 0.0)
        for r in ("evaluate_pool", "prune", "quantize", "evaluate")
    }
    for t in timings:
        per_pool_item = sum(t.per_item.get(p, 0.0) for p in pool_formats)
        # the no-passage control runs on the selected items only, never on the pool
        per_eval_item = per_pool_item + sum(
            t.per_item.get(p, 0.0) for p in [*decodes, "mc_nopassage"]
        )
        for n_available in languages_items.values():
            pool = min(it["pool_max"], n_available)
            selected = min(it["max_per_language"], math.ceil(pool * t.kept_share))
            c = costs["evaluate_pool"]
            c.jobs += 1
            c.items += pool
            c.tokens += int(pool * t.prompt_tokens * len(pool_formats))
            c.cpu_seconds += pool * per_pool_item
            c.core_seconds += pool * per_pool_item * t.threads
            c.longest_job = max(c.longest_job, pool * per_pool_item)
            n_ckpt = _checkpoints(config, t.model)
            c = costs["evaluate"]
            c.jobs += n_ckpt
            c.items += n_ckpt * selected
            prompts = len(pool_formats) + len(decodes)
            c.tokens += int(n_ckpt * selected * t.prompt_tokens * prompts)
            c.cpu_seconds += n_ckpt * selected * per_eval_item
            c.core_seconds += n_ckpt * selected * per_eval_item * t.threads
            c.longest_job = max(c.longest_job, selected * per_eval_item)
        pr = config["pruning"]
        for method, sec in t.prune.items():
            n = len(pr["sparsities"]) + len(pr.get("nm") or [])
            c = costs["prune"]
            c.jobs += n
            c.cpu_seconds += n * sec
            c.core_seconds += n * sec * t.compress_threads.get(method, t.threads)
            c.longest_job = max(c.longest_job, sec)
        for method, sec in t.quantize.items():  # each bit width costs about the same
            n = len(config["quantization"]["bits"])
            c = costs["quantize"]
            c.jobs += n
            c.cpu_seconds += n * sec
            c.core_seconds += n * sec * t.compress_threads.get(method, t.threads)
            c.longest_job = max(c.longest_job, sec)
    return list(costs.values())


def wall_seconds(costs: list[RuleCost], cores: int, slurm_jobs: int | None) -> float:
    """Local: the jobs' core-seconds (run time x threads) shared by the cores. SLURM: per rule,
    the longest job times the waves the jobs limit needs, rule after rule."""
    if slurm_jobs is None:
        return sum(c.core_seconds for c in costs) / max(1, cores)
    return sum(c.longest_job * math.ceil(c.jobs / slurm_jobs) for c in costs if c.jobs)


def _available(config: dict, root: Path, ds: str, lang: str) -> int:
    """Items a language offers: built ones, else the valid rows of a local file, else (a hub
    source not downloaded yet) pool_max, an upper bound."""
    built = root / "results" / "items" / ds / f"{lang}.parquet"
    if built.is_file():
        return pl.scan_parquet(built).select(pl.len()).collect().item()
    cfg = rule_params.dataset(config, ds)
    path = raw_path_for(cfg, lang)
    if path is not None and Path(path).is_file():
        good, _ = validate_rows(load_raw(cfg, lang), extractive=True)
        return good.height
    return config["items"]["pool_max"]


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def slurm_jobs_limit(root: Path) -> int | None:
    """The SLURM profile's `jobs` (profiles/slurm/config.yaml), or None without one."""
    path = root / "profiles" / "slurm" / "config.yaml"
    if not path.is_file():
        return None
    return int((yaml.safe_load(path.read_text()) or {}).get("jobs", 1))


def estimate(config: dict, root: Path, n_items: int | None = None, cores: int | None = None) -> str:
    """Measure, plan and return the printed report."""
    cores = cores or os.cpu_count() or 1
    timings = measure(config, root, n_items, cores)
    available = {
        (ds, lang): _available(config, root, ds, lang)
        for ds in config["datasets"]
        for lang in config["datasets"][ds]["languages"]
    }
    costs = plan(config, timings, available)
    jobs = slurm_jobs_limit(root)
    lines = []
    for t in timings:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in t.per_item.items())
        prunes = ", ".join(
            f"{k} {v:.1f} ({t.compress_threads.get(k, t.threads)})"
            for k, v in {**t.prune, **t.quantize}.items()
        )
        lines += [
            f"{t.model}: timed on {t.n_items} items with {t.threads} threads (an evaluation "
            f"job's): seconds per item: {parts}; {t.prompt_tokens:.0f} prompt tokens per item; "
            f"right in open and mc: {t.kept_share:.0%}; seconds per pruned or quantized "
            f"checkpoint (threads): {prunes}",
        ]
    lines += ["", f"{'rule':15} {'jobs':>6} {'items':>8} {'tokens':>12} {'CPU time':>10}"]
    for c in costs:
        lines.append(
            f"{c.rule:15} {c.jobs:>6} {c.items:>8} {c.tokens:>12} {_hms(c.cpu_seconds):>10}"
        )
    total = sum(c.cpu_seconds for c in costs)
    lines += [
        f"{'total':15} {sum(c.jobs for c in costs):>6} {sum(c.items for c in costs):>8} "
        f"{sum(c.tokens for c in costs):>12} {_hms(total):>10}",
        "",
        f"wall time here ({cores} cores shared by the jobs' threads): "
        f"{_hms(wall_seconds(costs, cores, None))}",
    ]
    if jobs is not None:
        slurm = wall_seconds(costs, cores, jobs)
        lines.append(
            f"wall time on SLURM (profiles/slurm: up to {jobs} jobs at once, each at this "
            f"machine's speed; faster on GPU nodes): {_hms(slurm)}"
        )
    lines.append(
        "not timed: import, calibration, SAE and concept rules, aggregation, figures "
        "(see docs/cluster.md for their sizes)"
    )
    return "\n".join(lines)
