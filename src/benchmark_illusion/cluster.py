"""Memory and runtime of the heavy rules, sized from a model's parameter count.

The rules' `resources` call `job_resources`; a cluster profile (profiles/slurm) adds only the
site-specific part: partitions, account, GPUs. Locally, Snakemake ignores memory and runtime
unless `--resources` caps them.

The parameter count comes from the weights when they are on disk: the imported safetensors
folder (resources/models/{model}), a local folder, or the GGUF file of a `gguf_file` /
`gguf_package` model (headers only: nothing is loaded). A hub model that is not imported yet
uses its config's `params_b`, else the safetensors headers of its files in the hub cache, else
the hub's safetensors metadata, and DEFAULT_PARAMS_B (8 billion, the largest model of the
paper's grid) only when none of these answers (the Snakefile then warns, naming the key).

Memory is host RAM (`mem_mb`, what SLURM's --mem asks for); the GPU holds the model during
evaluation and pruning. Both estimates grow with the attempt number, so a job that a cluster
retries (profile `retries`) after running out of memory or time asks for more.

Measured anchors (2 CPU cores, fp32, 135M parameters, calibration 16 x 128): import 21 s,
prune 9-35 s, 0.8-1.0 GB peak; evaluation of a language (29 items) ~1.5 min, 1.4 GB; the
aggregation of a paper-scale grid (239,400 item x checkpoint pairs): 10.6 s, 0.74 GiB, and of
10 million log rows (526,680 pairs, every decode on every item): 19.0 s, 1.55 GiB
(benchmarks/aggregate_scale.py). The formulas leave headroom over these.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .sources import ModelSourceError, resolve_gguf, safetensors_params

DEFAULT_PARAMS_B = 8.0
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# kind: (GB of RAM per GB of weights, fixed GB, minutes per billion parameters, fixed minutes)
PLAN = {
    "import": (2.0, 4, 6, 20),  # load + rebuilt copy; hub download time dominates at scale
    "evaluate": (1.5, 6, 12, 20),  # one benchmark (language) of one checkpoint, all decodes
    "prune": (2.5, 8, 15, 30),  # weights, a pruned copy per block, calibration activations, H
    "calibration": (0.0, 8, 0, 60),  # tokenizer only; C4 streaming dominates
    # SAE training: the model + the activation buffer (concepts.sae.buffer_tokens x hidden size x
    # 4 bytes: 16 GB for 1M tokens of a 4096-wide 8B model, ~1 GB per GB of bf16 weights) + the
    # SAE and its Adam state
    "sae": (2.0, 8, 20, 60),
    "concepts": (1.5, 6, 8, 20),  # labels (one corpus pass) or one benchmark's activations
}


def _gguf_params(path: Path) -> int | None:
    """Parameter count from a GGUF file's tensor infos (the gguf package reads the header only)."""
    try:
        from gguf import GGUFReader
    except ImportError:  # pragma: no cover - gguf is a dependency
        return None
    reader = GGUFReader(str(path), "r")
    return int(sum(int(t.n_elements) for t in reader.tensors))


def _gguf_path(cfg: dict, root: Path) -> Path | None:
    """The GGUF file of a gguf_file / gguf_package model, or None (other source, or not found)."""
    if cfg.get("source") not in ("gguf_file", "gguf_package"):
        return None
    resolved = {**cfg, "path": str(root / cfg["path"])} if cfg["source"] == "gguf_file" else cfg
    try:
        return resolve_gguf(resolved)
    except (ModelSourceError, ImportError, ValueError):  # not installed, or not a module name
        return None


def parameter_count(name: str, cfg: dict, root: Path = Path(".")) -> tuple[float, str]:
    """(parameters, where the number comes from) for model `name` with config `cfg`."""
    imported = root / "resources" / "models" / name
    n = safetensors_params(imported) if imported.is_dir() else None
    if n:
        return float(n), f"safetensors headers in {imported}"
    if cfg.get("source") == "local" and (root / cfg["path"]).is_dir():
        n = safetensors_params(root / cfg["path"])
        if n:
            return float(n), f"safetensors headers in {cfg['path']}"
    gguf = _gguf_path(cfg, root)
    if gguf is not None:
        n = _gguf_params(gguf)
        if n:
            return float(n), f"GGUF header of {gguf.name}"
    if cfg.get("params_b"):
        return float(cfg["params_b"]) * 1e9, "config params_b"
    if cfg.get("source") == "hub":
        record = root / "resources" / "hub" / f"{name}.json"  # written by fetch_hub_model
        if record.is_file():
            n = json.loads(record.read_text()).get("n_parameters")
            if n:
                return float(n), f"safetensors headers of the fetched files ({record})"
        found = hub_params(cfg["id"], cfg.get("revision"))
        if found is not None:
            return float(found[0]), found[1]
    return DEFAULT_PARAMS_B * 1e9, f"default {DEFAULT_PARAMS_B:g}B (set models.{name}.params_b)"


def guessed(source: str) -> bool:
    """Whether parameter_count's `source` is the default guess, not a count."""
    return source.startswith("default ")


def hub_params(repo: str, revision: str | None = None) -> tuple[int, str] | None:
    """(parameters, where from) of a hub model before it is imported: the safetensors headers of
    its files in the local hub cache (HF_HOME; filled by the prefetch target) when they are
    there, else the hub's safetensors metadata (headers only, nothing downloaded; skipped when
    HF_HUB_OFFLINE is set). None when neither answers (no network, a gated model without
    HF_TOKEN, no safetensors in the repository)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a dependency
        return None
    try:
        cached = Path(
            snapshot_download(
                repo, revision=revision, local_files_only=True, allow_patterns=["*.json"]
            )
        )
    except Exception:  # noqa: BLE001 - not in the cache: any reason means "ask the hub"
        cached = None
    if cached is not None:
        n = safetensors_params(cached)
        if n:
            return n, f"safetensors headers in the hub cache ({cached})"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return None
    try:
        from huggingface_hub import get_safetensors_metadata

        meta = get_safetensors_metadata(repo, revision=revision, timeout=10)
    except Exception:  # noqa: BLE001 - offline, gated, not found, not safetensors: no count
        return None
    n = int(sum(meta.parameter_count.values()))
    return (n, f"hub safetensors metadata of {repo}") if n else None


def job_resources(kind: str, n_params: float, dtype: str = "float32", attempt: int = 1) -> dict:
    """{'mem_mb': int, 'runtime': int (minutes)} for one job of `kind` (see PLAN)."""
    if kind not in PLAN:
        raise ValueError(f"unknown job kind {kind!r}; known: {', '.join(PLAN)}")
    ram_per_weight_gb, fixed_gb, min_per_b, fixed_min = PLAN[kind]
    weights_gb = n_params * DTYPE_BYTES.get(dtype, 4) / 1e9
    mem_gb = (ram_per_weight_gb * weights_gb + fixed_gb) * attempt
    minutes = (min_per_b * n_params / 1e9 + fixed_min) * attempt
    return {"mem_mb": int(math.ceil(mem_gb * 1024 / 512) * 512), "runtime": int(math.ceil(minutes))}


def aggregate_resources(n_item_checkpoints: int, attempt: int = 1) -> dict:
    """The aggregation's memory and time grow with items x checkpoints (the item values and
    the bootstrap's matrix products)."""
    mem_gb = (1 + 4e-6 * n_item_checkpoints) * attempt  # paper grid: 239,400 pairs -> 2 GB
    minutes = (5 + n_item_checkpoints / 100_000) * attempt
    return {"mem_mb": int(math.ceil(mem_gb * 1024 / 512) * 512), "runtime": int(math.ceil(minutes))}


# ------------------------------------------------------------------------- threads per job

# Model steps that run one thread per job on a CPU, side by side (one job per core). Two threads
# made an evaluation only 1.26x faster on 2 cores, so two one-thread jobs do 1.6x the work; and a
# thread count fixed by the step, not by --cores, gives the same rows on any number of cores.
# What the thread count changes in them, measured on the bundled model (2-core AMD EPYC, CPU
# torch 2.13, one thread against two): nothing in magnitude, Wanda or RTN weights or in the
# concept labels (bit for bit); in evaluation rows no output, judgement, option choice or gold
# rank, only log-probs in their last bits on some prompts (28 of the embedded run's 2,180 rows,
# 1.7e-6 relative at most); in concept activations the same (one item of 28). test_e2e.py's
# test_one_thread_steps_agree_at_two_threads re-checks it against the smoke run. SparseGPT, GPTQ
# and the SAE's training change more (SparseGPT: 2 % of its mask): they keep MODEL_JOB_THREADS.
ONE_THREAD_ON_CPU: dict[str, tuple[str, ...] | None] = {
    "evaluate_pool": None,  # None: every method
    "evaluate": None,
    "concept_labels": None,
    "concept_activations": None,
    "prune": ("magnitude", "wanda"),
    "quantize": ("rtn",),
}
MODEL_JOB_THREADS = 4  # every other model job, and all of them on a GPU; capped at --cores


def job_threads(rule: str, method: str | None = None, gpu: bool = False) -> int:
    """Threads of one `rule` job (for `method`, where the rule has one): 1 on the CPU for the
    steps in ONE_THREAD_ON_CPU, else MODEL_JOB_THREADS (Snakemake caps it at --cores). On a GPU
    every model job keeps MODEL_JOB_THREADS, so that no more of them share the GPU than before."""
    if not gpu and rule in ONE_THREAD_ON_CPU:
        methods = ONE_THREAD_ON_CPU[rule]
        if methods is None or method in methods:
            return 1
    return MODEL_JOB_THREADS


def runs_on_gpu(device: str) -> bool:
    """Whether model jobs will run on a GPU (config evaluation.device), told without importing
    torch: 'cpu' never, 'cuda…' / 'mps' always, 'auto' when the NVIDIA driver lists a GPU (or
    ROCm's /dev/kfd exists) and CUDA_VISIBLE_DEVICES does not hide every device."""
    if device == "cpu":
        return False
    if device != "auto":
        return True
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    nvidia = Path("/proc/driver/nvidia/gpus")
    return (nvidia.is_dir() and any(nvidia.iterdir())) or Path("/dev/kfd").exists()
