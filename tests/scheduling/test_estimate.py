"""The cost estimate's arithmetic (jobs, items, tokens, CPU and wall time) on given timings."""

from __future__ import annotations

import math

import pytest

from benchmark_illusion.scheduling.estimate import Timing, plan, wall_seconds


def config(**over):
    cfg = {
        "items": {"pool_max": 100, "max_per_language": 30},
        "evaluation": {
            "formats": ["open", "candidates", "mc"],
            "recovery": {"beam": True, "sample": True, "oneshot": False},
        },
        "pruning": {"methods": ["magnitude", "wanda"], "sparsities": [0.2, 0.4], "nm": ["2:4"]},
        "quantization": {"methods": ["rtn", "gptq"], "bits": [8, 4, 3]},
        "calibration": {"n_windows": 16},
    }
    cfg.update(over)
    return cfg


TIMING = Timing(
    model="m",
    n_items=4,
    threads=2,
    per_item={"open+mc": 2.0, "candidates": 1.0, "beam": 3.0, "sample": 4.0, "oneshot": 9.0},
    prompt_tokens=150.0,
    kept_share=0.25,
    prune={"magnitude": 10.0, "wanda": 60.0},
    quantize={"rtn": 5.0, "gptq": 80.0},
    compress_threads={"magnitude": 1, "wanda": 1, "rtn": 1, "gptq": 2},
)


def test_plan_counts_the_jobs_items_and_time_of_each_rule():
    langs = {("xquad", "en"): 500, ("xquad", "de"): 40}
    costs = {c.rule: c for c in plan(config(), [TIMING], langs)}
    pool = costs["evaluate_pool"]
    assert pool.jobs == 2 and pool.items == 100 + 40  # min(pool_max, available)
    assert pool.cpu_seconds == pytest.approx(140 * (2.0 + 1.0))
    assert pool.tokens == 140 * 150 * 2  # two prompts per item: open, candidates
    ev = costs["evaluate"]
    ckpts = 1 + 2 * (2 + 1) + 2 * 3  # dense + 2 methods x (2 sparsities + 2:4) + 2 x 3 widths
    selected = min(30, math.ceil(100 * 0.25)) + math.ceil(40 * 0.25)  # 25 + 10
    assert ev.jobs == 2 * ckpts and ev.items == ckpts * selected
    per_item = 2.0 + 1.0 + 3.0 + 4.0  # oneshot is off: not counted
    assert ev.cpu_seconds == pytest.approx(ckpts * selected * per_item)
    assert ev.longest_job == pytest.approx(25 * per_item)
    pr = costs["prune"]
    assert pr.jobs == 2 * 3 and pr.cpu_seconds == pytest.approx(3 * (10.0 + 60.0))
    assert pr.longest_job == 60.0
    q = costs["quantize"]
    assert q.jobs == 2 * 3 and q.cpu_seconds == pytest.approx(3 * (5.0 + 80.0))
    assert q.longest_job == 80.0 and q.items == 0


def test_variants_and_their_twins_are_evaluated_like_the_pipelines_checkpoints():
    """Two variants of model m (none of another model): two more checkpoints for m's
    evaluations, and each gets its twin per perturbation seed."""
    langs = {("xquad", "en"): 500}
    base = {c.rule: c for c in plan(config(), [TIMING], langs)}["evaluate"].jobs
    variants = {"q4": {"source": "gguf_file", "path": "x", "method": "gguf"}}
    variants["q8"] = dict(variants["q4"])
    models = {"m": {"variants": variants}, "other": {"variants": {"z": variants["q4"]}}}
    ev = {c.rule: c for c in plan(config(models=models), [TIMING], langs)}["evaluate"]
    assert ev.jobs == base + 2
    seeds = {"controls": {"perturbation": {"seeds": [0, 1]}}}
    ev = {c.rule: c for c in plan(config(models=models, **seeds), [TIMING], langs)}["evaluate"]
    compressed = 2 * (2 + 1) + 2 * 3 + 2  # pruned, quantized, variants
    assert ev.jobs == 1 + compressed * (1 + 2)


def test_selection_is_capped_and_candidates_counted_only_when_configured():
    cfg = config(evaluation={"formats": ["open", "mc"], "recovery": {}})
    t = Timing("m", 4, 2, {"open+mc": 2.0, "candidates": 5.0}, 100.0, 1.0, {})
    costs = {c.rule: c for c in plan(cfg, [t], {("d", "en"): 1000})}
    assert costs["evaluate_pool"].cpu_seconds == pytest.approx(100 * 2.0)
    assert costs["evaluate"].items == 13 * 30  # every item kept, capped at max_per_language


def test_wall_time_local_shares_the_cores_and_slurm_runs_rules_in_waves():
    costs = plan(config(), [TIMING], {("xquad", "en"): 500, ("xquad", "de"): 40})
    by = {c.rule: c for c in costs}
    # a job holds as many cores as it has threads: evaluations (timed at 2) and GPTQ 2,
    # magnitude, Wanda and RTN 1
    assert by["evaluate"].core_seconds == pytest.approx(2 * by["evaluate"].cpu_seconds)
    assert by["prune"].core_seconds == pytest.approx(by["prune"].cpu_seconds)
    assert by["quantize"].core_seconds == pytest.approx(3 * (5.0 * 1 + 80.0 * 2))
    core_seconds = sum(c.core_seconds for c in costs)
    assert wall_seconds(costs, cores=2, slurm_jobs=None) == pytest.approx(core_seconds / 2)
    assert wall_seconds(costs, cores=8, slurm_jobs=None) == pytest.approx(core_seconds / 8)
    waves = sum(c.longest_job * math.ceil(c.jobs / 4) for c in costs)
    assert wall_seconds(costs, cores=2, slurm_jobs=4) == pytest.approx(waves)
    one_wave = sum(c.longest_job for c in by.values())
    assert wall_seconds(costs, cores=2, slurm_jobs=1000) == pytest.approx(one_wave)
