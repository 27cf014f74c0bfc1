"""Memory and runtime of the heavy rules, sized from a model's parameter count.

The rules' `resources` call `job_resources`; a cluster profile (profiles/slurm) adds only the
site-specific part: partitions, account, GPUs. Locally, Snakemake ignores memory and runtime
unless `--resources` caps them.

The parameter count comes from the weights when they are on disk: the imported safetensors
folder (resources/models/{model}), a local folder, or the GGUF file of a `gguf_file` /
`gguf_package` model (headers only: nothing is loaded). A hub model that is not imported yet
uses its config's `params_b`, else the safetensors headers of its files in the hub cache, else
the hub's safetensors metadata, and DEFAULT_PARAMS_B (8 billion, about the largest model of
config/paper.yaml, the grid of Wen et al., arXiv:2606.17609) only when none of these answers
(the Snakefile then warns, naming the key).

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

from benchmark_illusion.models.sources import (
    ModelSourceError,
    gguf_header,
    resolve_gguf,
    safetensors_params,
)

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


def _added(terms: dict[str, float]) -> float:
    """The terms added up one after the other, in order (the estimates' totals)."""
    total = 0.0
    for value in terms.values():
        total += value
    return total


def _mb(gb: float) -> int:
    """GB to MB, rounded up to 512 MB."""
    return int(math.ceil(gb * 1024 / 512) * 512)


def job_terms(kind: str, n_params: float, dtype: str = "float32") -> dict[str, dict[str, float]]:
    """The terms of one `kind` job's host memory and runtime (see PLAN), before the attempt:

      mem_gb   weights  GB of RAM per GB of weights x n_params x bytes per value (float32 4,
                        bfloat16 and float16 2, any other 4) / 1e9
               fixed    fixed GB
      minutes  size     minutes per billion parameters x n_params / 1e9
               fixed    fixed minutes

    job_resources adds each up, multiplies by the attempt and rounds up (memory to 512 MB,
    minutes to whole minutes)."""
    if kind not in PLAN:
        raise ValueError(f"unknown job kind {kind!r}; known: {', '.join(PLAN)}")
    ram_per_weight_gb, fixed_gb, min_per_b, fixed_min = PLAN[kind]
    weights_gb = n_params * DTYPE_BYTES.get(dtype, 4) / 1e9
    return {
        "mem_gb": {"weights": ram_per_weight_gb * weights_gb, "fixed": fixed_gb},
        "minutes": {"size": min_per_b * n_params / 1e9, "fixed": fixed_min},
    }


def _resources(terms: dict[str, dict[str, float]], attempt: int) -> dict:
    mem_gb = _added(terms["mem_gb"]) * attempt
    minutes = _added(terms["minutes"]) * attempt
    return {"mem_mb": _mb(mem_gb), "runtime": int(math.ceil(minutes))}


def job_resources(kind: str, n_params: float, dtype: str = "float32", attempt: int = 1) -> dict:
    """{'mem_mb': int, 'runtime': int (minutes)} for one job of `kind` (see PLAN): the terms of
    job_terms added up, x the attempt, memory rounded up to 512 MB, minutes up to whole ones."""
    return _resources(job_terms(kind, n_params, dtype), attempt)


# ------------------------------------------------------------------------- GPU memory

# The shape of an 8B model (Llama-3.1-8B; config/paper.yaml's largest model is of that size), used
# when a model's shape cannot be read yet (a hub model before its download): too much rather than
# too little.
DEFAULT_SHAPE = {
    "layers": 32,
    "hidden": 4096,
    "kv_dim": 1024,
    "intermediate": 14336,
    "vocab": 128256,
}
GPU_CONTEXT_MB = 1024  # the CUDA context, cuBLAS workspaces and the allocator's slack
GPU_HEADROOM = 1.15


def _shape_from_config(path: Path) -> dict | None:
    """The shape of a transformers config.json (text models with the usual key names)."""
    if not path.is_file():
        return None
    c = json.loads(path.read_text())
    c = c.get("text_config", c)
    try:
        hidden, heads = c["hidden_size"], c["num_attention_heads"]
        head_dim = c.get("head_dim") or hidden // heads
        return {
            "layers": c["num_hidden_layers"],
            "hidden": hidden,
            "kv_dim": c.get("num_key_value_heads", heads) * head_dim,
            "intermediate": c.get("intermediate_size", 4 * hidden),
            "vocab": c["vocab_size"],
        }
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def _shape_from_gguf(path: Path) -> dict | None:
    """The shape of a GGUF model, from its header (`<arch>.block_count` and friends)."""
    arch = gguf_header(path, {"general.architecture"}).get("general.architecture")
    if not arch:
        return None
    keys = {
        "layers": f"{arch}.block_count",
        "hidden": f"{arch}.embedding_length",
        "intermediate": f"{arch}.feed_forward_length",
        "heads": f"{arch}.attention.head_count",
        "kv_heads": f"{arch}.attention.head_count_kv",
        "vocab": "tokenizer.ggml.tokens",  # an array: its length
    }
    h = gguf_header(path, set(keys.values()))
    v = {k: h.get(key) for k, key in keys.items()}
    if not all(v[k] for k in ("layers", "hidden", "heads", "vocab")):
        return None
    kv_heads = v["kv_heads"] or v["heads"]
    return {
        "layers": int(v["layers"]),
        "hidden": int(v["hidden"]),
        "kv_dim": int(kv_heads) * int(v["hidden"]) // int(v["heads"]),
        "intermediate": int(v["intermediate"] or 4 * v["hidden"]),
        "vocab": int(v["vocab"]),
    }


def model_shape(name: str, cfg: dict, root: Path = Path(".")) -> tuple[dict, str]:
    """(layers, hidden, kv_dim, intermediate, vocab; where they come from) of model `name`: its
    import's config.json, a local folder's, a downloaded hub snapshot's, or a GGUF header; else
    DEFAULT_SHAPE."""
    candidates = [root / "resources" / "models" / name / "config.json"]
    if cfg.get("source") == "local":
        candidates.append(root / cfg["path"] / "config.json")
    record = root / "resources" / "hub" / f"{name}.json"
    if cfg.get("source") == "hub" and record.is_file():
        candidates.append(Path(json.loads(record.read_text())["snapshot"]) / "config.json")
    for path in candidates:
        shape = _shape_from_config(path)
        if shape:
            return shape, str(path)
    gguf = _gguf_path(cfg, root)
    if gguf is not None:
        shape = _shape_from_gguf(gguf)
        if shape:
            return shape, f"GGUF header of {gguf.name}"
    return dict(DEFAULT_SHAPE), "default (the 8B shape)"


def gpu_memory_terms(
    kind: str, n_params: float, dtype: str, shape: dict, evaluation: dict, calibration: dict
) -> dict[str, float]:
    """The terms of one `kind` job's GPU memory in bytes, before the headroom, the CUDA context
    and the attempt (gpu_memory_mb adds them up). b: bytes per value of `dtype` (float32 4,
    bfloat16 and float16 2, any other 4).

    every kind   weights                  n_params x b
    evaluate     kv_cache                 evaluation.decode_tokens x layers x 2 (K, V) x kv_dim x b
                 logits                   evaluation.batch_tokens x vocab x b
                 log_probs                evaluation.batch_tokens / batch_size (one row's
                                          positions) x vocab x 2 (log-probs and a copy) x 4
                 activations              evaluation.batch_tokens x max(hidden, intermediate)
                                          x 4 x b
    prune        block_copies             2 x 4 x n_params / layers (one block twice, float32)
    (quantize)   calibration_activations  calibration.n_windows x seq_len x hidden x 3 x 4
                 hessian                  intermediate^2 x 2 x 4 (SparseGPT's or GPTQ's Hessian
                                          and its inverse for the widest input, float32)
    sae,         activation_buffers       2e9 (concepts.sae.buffer_tokens sizes the host side)
    concepts
    import       none, and no weights: the conversion runs on the CPU ({})
    Unset evaluation keys count as decode_tokens 8192, batch_tokens 2048, batch_size 8; unset
    calibration keys as n_windows 128, seq_len 2048."""
    if kind == "import":
        return {}
    b = DTYPE_BYTES.get(dtype, 4)
    terms = {"weights": n_params * b}
    if kind == "evaluate":
        terms["kv_cache"] = (
            evaluation.get("decode_tokens", 8192) * shape["layers"] * 2 * shape["kv_dim"] * b
        )
        rows = max(evaluation.get("batch_size", 8), 1)
        terms["logits"] = evaluation.get("batch_tokens", 2048) * shape["vocab"] * b
        terms["log_probs"] = evaluation.get("batch_tokens", 2048) / rows * shape["vocab"] * 2 * 4
        terms["activations"] = (
            evaluation.get("batch_tokens", 2048)
            * max(shape["hidden"], shape["intermediate"])
            * 4
            * b
        )
    elif kind == "prune":
        terms["block_copies"] = 2 * 4 * n_params / max(shape["layers"], 1)
        terms["calibration_activations"] = (
            calibration.get("n_windows", 128)
            * calibration.get("seq_len", 2048)
            * shape["hidden"]
            * 3
            * 4
        )
        terms["hessian"] = shape["intermediate"] ** 2 * 2 * 4
    elif kind in ("sae", "concepts"):
        terms["activation_buffers"] = 2e9
    else:
        raise ValueError(f"unknown job kind {kind!r} for GPU memory")
    return terms


def gpu_memory_mb(
    kind: str,
    n_params: float,
    dtype: str,
    shape: dict,
    evaluation: dict,
    calibration: dict,
    attempt: int = 1,
) -> int:
    """GPU memory of one `kind` job in MB (rounded up to 512), grown with the attempt: the terms
    of gpu_memory_terms added up (bytes), x 1.15 (GPU_HEADROOM), in MiB, + 1024 MB for the CUDA
    context and the allocator's slack (GPU_CONTEXT_MB), x the attempt, rounded up to 512 MB.
    0 for import (the conversion runs on the CPU). Every job logs its peak GPU memory, to
    compare (scheduling/gpu_peaks.py prints the two side by side)."""
    terms = gpu_memory_terms(kind, n_params, dtype, shape, evaluation, calibration)
    if not terms:
        return 0
    mb = (_added(terms) * GPU_HEADROOM / 2**20 + GPU_CONTEXT_MB) * attempt
    return int(math.ceil(mb / 512) * 512)


def job_gpu_memory_mb(
    kind: str, config: dict, model: str, n_params: float, shape: dict, attempt: int = 1
) -> int:
    """gpu_memory_mb of a `kind` job of `model` under `config`: 0 when evaluation.device is cpu;
    evaluation runs in evaluation.dtype, pruning, quantization and concepts in the model's."""
    if config["evaluation"]["device"] == "cpu":
        return 0
    dtype = (
        config["evaluation"]["dtype"]
        if kind == "evaluate"
        else config["models"][model].get("dtype", "float32")
    )
    return gpu_memory_mb(
        kind, n_params, dtype, shape, config["evaluation"], config["calibration"], attempt
    )


def gpu_request(spec: str | None, gpu_mem_mb: int) -> dict:
    """The SLURM resources that ask for `gpu_mem_mb` of GPU memory the way a site wants it
    (config `gpu_memory_request`, set in the cluster profile):

      None or ''                       nothing (any GPU of the partition)
      'gres:<template>'                gres, e.g. 'gres:gpumem:{gb}g' -> --gres=gpumem:40g
      'constraint:<feature>=<GB>,...'  the smallest listed feature with enough memory, e.g.
                                       'constraint:a100_40g=40,a100_80g=80' -> -C a100_80g
      'gpu_model:<model>=<GB>,...'     likewise as the GPU model (--gpus=<model>:1)
    {gb} and {mb} in a template are the estimate rounded up to whole GB / MB. When no listed
    size is enough, the largest is asked for (the job's log shows its peak memory)."""
    if not spec or gpu_mem_mb <= 0:
        return {}
    resource, _, rest = spec.partition(":")
    if resource not in ("gres", "constraint", "gpu_model") or not rest:
        raise ValueError(
            f"gpu_memory_request: {spec!r} is not 'gres:<template>', "
            "'constraint:<feature>=<GB>,...' or 'gpu_model:<model>=<GB>,...'"
        )
    gb = math.ceil(gpu_mem_mb / 1024)
    if resource == "gres":
        return {"gres": rest.format(gb=gb, mb=gpu_mem_mb)}
    tiers = []
    for part in rest.split(","):
        name, _, size = part.strip().partition("=")
        try:
            tiers.append((float(size), name.strip()))
        except ValueError:
            raise ValueError(
                f"gpu_memory_request: {part.strip()!r} in {spec!r} is not <name>=<GB>"
            ) from None
    tiers.sort()
    fit = next((name for size, name in tiers if size >= gb), tiers[-1][1])
    return {resource: fit}


def aggregate_terms(n_item_checkpoints: int) -> dict[str, dict[str, float]]:
    """The terms of the aggregation's memory and runtime, before the attempt: they grow with
    items x checkpoints (the item values and the bootstrap's matrix products).

      mem_gb   fixed  1
               pairs  4e-6 x n_item_checkpoints   (paper grid: 239,400 pairs -> 2 GB in all)
      minutes  fixed  5
               pairs  n_item_checkpoints / 100,000"""
    return {
        "mem_gb": {"fixed": 1, "pairs": 4e-6 * n_item_checkpoints},
        "minutes": {"fixed": 5, "pairs": n_item_checkpoints / 100_000},
    }


def aggregate_resources(n_item_checkpoints: int, attempt: int = 1) -> dict:
    """{'mem_mb', 'runtime'} of the aggregation: aggregate_terms added up, x the attempt,
    memory rounded up to 512 MB, minutes up to whole ones."""
    return _resources(aggregate_terms(n_item_checkpoints), attempt)


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
    every model job keeps MODEL_JOB_THREADS, which bounds how many of them share the GPU."""
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
