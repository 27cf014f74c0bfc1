"""The perturbation floor: the dense model with seeded Gaussian noise of a compressed checkpoint's
size, evaluated like any checkpoint, answers "would any change of this size do this?".

For every pruned or quantized checkpoint and every seed of `controls.perturbation.seeds`, a
perturbed twin: each Linear that the compression changed gets W' = W + (r ||W||_F / ||N||_F) N,
where r = ||C - W||_F / ||W||_F is that Linear's relative change in the compressed checkpoint C
and N is standard normal noise drawn on the CPU in float32 from a generator seeded with
(seed, the Linear's name). So every changed Linear moves by exactly the compression's relative
Frobenius distance, in a random direction; Linears the compression left as they were (embeddings,
`lm_head`, norms, and any Linear it did not touch) stay bit for bit.

A twin is named like a checkpoint: method `noise<seed>-<source method>` (e.g. `noise0-wanda`),
the source's structure and sparsity, in the pruned checkpoints' layout
(results/checkpoints/{model}/noise0-wanda/unstructured/0.3/), so `evaluate` and every table treat
it as one more checkpoint, and the tables key it by (model, method, structure, sparsity) like any
other (the names: compression/names.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path

from benchmark_illusion.compression.names import parse_perturbed

log = logging.getLogger("benchmark_illusion")

REPORT = "perturbation.json"


def noise_seed(seed: int, name: str) -> int:
    """The generator seed of one Linear: the first 8 bytes of sha256('seed|name'), 63 bits (a
    stable hash: the same on any machine and Python, unlike hash())."""
    digest = hashlib.sha256(f"{int(seed)}|{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def _tensor_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (one file, or a sharded index)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {k: folder / v for k, v in weight_map.items()}
    from safetensors import safe_open

    files = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as s:
            files.update({k: f for k in s.keys()})  # noqa: SIM118 (safe_open is no dict)
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {folder}")
    return files


def _read(files: dict[str, Path], name: str):
    from safetensors import safe_open

    with safe_open(str(files[name]), framework="pt") as s:
        return s.get_tensor(name)


def _norm(x) -> float:
    """Frobenius norm, summed in float64 (the same value at any thread count, to the last bits)."""
    return float(x.double().norm())


def perturb_model(net, source_dir: str | Path, seed: int) -> dict:
    """Add the noise to `net` (the dense model, changed in place) and return the report.

    Every nn.Linear of `net` whose weight is stored in `source_dir` (a compressed checkpoint of
    the same architecture) and differs from it gets noise of the same relative Frobenius size;
    the others are left as they are. The noise is drawn in float32 on the CPU, added in float32,
    and the sum stored in the model's dtype. Report: per Linear the relative change it matched
    (`target`) and the one measured on the stored weights (`measured`); overall values over the
    perturbed Linears (sqrt of summed squared distances over summed squared norms).
    """
    import torch
    from torch import nn

    t0 = time.perf_counter()
    files = _tensor_files(Path(source_dir))
    layers, skipped = {}, []
    num = den = num_target = 0.0
    with torch.no_grad():
        for name, module in net.named_modules():
            if not isinstance(module, nn.Linear) or f"{name}.weight" not in files:
                continue
            w = module.weight
            c = _read(files, f"{name}.weight")
            if c.shape != w.shape:
                raise ValueError(
                    f"{name}: shape {tuple(c.shape)} in {source_dir}, {tuple(w.shape)} in the "
                    "dense model: not a compressed copy of this model"
                )
            w32 = w.detach().to("cpu", torch.float32, copy=True)  # kept: w is overwritten below
            c32 = c.to(torch.float32)
            if torch.equal(w32, c32):
                skipped.append(name)
                continue
            w_norm = _norm(w32)
            target = _norm(c32 - w32) / w_norm
            g = torch.Generator(device="cpu").manual_seed(noise_seed(seed, name))
            noise = torch.randn(w32.shape, generator=g, dtype=torch.float32)
            scale = target * w_norm / _norm(noise)
            new = (w32 + noise * scale).to(w.dtype)
            w.copy_(new)
            change = _norm(new.to(torch.float32) - w32)
            layers[name] = {
                "target": target,
                "measured": change / w_norm,
                "numel": w.numel(),
            }
            num += change**2
            num_target += (target * w_norm) ** 2
            den += w_norm**2
    if not layers:
        raise ValueError(f"{source_dir} changes no Linear of the dense model: nothing to match")
    deviation = max(abs(v["measured"] - v["target"]) for v in layers.values())
    return {
        "seed": int(seed),
        "noise": "gaussian",
        "layers": layers,
        "n_perturbed": len(layers),
        "unchanged": skipped,
        "relative_change": math.sqrt(num / den),
        "source_relative_change": math.sqrt(num_target / den),
        "max_abs_deviation": deviation,
        "seconds": time.perf_counter() - t0,
    }


def perturb_file(
    model_dir: str | Path,
    source_dir: str | Path,
    out: str | Path,
    params: dict,
    *,
    model: str,
    method: str,
    structure: str,
    sparsity: float,
    trust_remote_code: bool = False,
    threads: int | None = 1,
) -> dict:
    """Write the perturbed twin `method` (noise<seed>-<source>) of the compressed checkpoint in
    `source_dir`: the dense model in `model_dir` with noise of the source's size per Linear, in
    the checkpoint layout (safetensors, tokenizer, provenance.json) with `perturbation.json`,
    atomically.

    params: the rule's params (params.perturb: the model's dtype). The seed is the method's.
    Always on the CPU (the noise is drawn there; the step is a load, one pass over the weights
    and a save). threads: torch threads (1: the norms and the cast do not depend on it anyway).
    """
    import torch

    from benchmark_illusion.compression.names import describe_checkpoint
    from benchmark_illusion.models.checkpoints import (
        checkpoint_hash,
        load_checkpoint,
        write_checkpoint,
    )

    parsed = parse_perturbed(method)
    if parsed is None:
        raise ValueError(f"{method!r} is no perturbed method (noise<seed>-<source method>)")
    seed, source = parsed
    if threads:
        torch.set_num_threads(threads)
    net, tok = load_checkpoint(model_dir, params["dtype"], "cpu", trust_remote_code)
    report = perturb_model(net, source_dir, seed)
    report.update(
        model=model,
        method=method,
        source_method=source,
        structure=describe_checkpoint(source, structure)[0],  # as the logs spell it
        sparsity=float(sparsity),
        dtype=params["dtype"],
        torch_threads=torch.get_num_threads(),
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
        perturbation={k: report[k] for k in ("seed", "source_method", "source", "relative_change")},
    )
    log.info(
        "perturbed %s like %s (seed %d): %d Linears, relative change %.6f (source %.6f, "
        "largest deviation of a Linear %.2e), %d unchanged, in %.1fs",
        model,
        source_dir,
        seed,
        report["n_perturbed"],
        report["relative_change"],
        report["source_relative_change"],
        report["max_abs_deviation"],
        len(report["unchanged"]),
        report["seconds"],
    )
    return report


def report_rows(paths) -> list[tuple]:
    """(model, method, structure, sparsity, seed, source_method, relative_change,
    source_relative_change, n_perturbed) of each twin's perturbation.json (a file, or the
    checkpoint folder holding it), for the aggregation's `perturbations` table."""
    rows = []
    for p in paths:
        p = Path(p)
        r = json.loads((p / REPORT if p.is_dir() else p).read_text())
        rows.append(
            (
                r["model"],
                r["method"],
                r["structure"],
                float(r["sparsity"]),
                int(r["seed"]),
                r["source_method"],
                float(r["relative_change"]),
                float(r["source_relative_change"]),
                int(r["n_perturbed"]),
            )
        )
    return rows
