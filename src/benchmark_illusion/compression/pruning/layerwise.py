"""Prune (or quantize) a causal LM block by block.

The inputs of the first decoder block are captured with a forward pre-hook (whatever
arguments the model passes: hidden states, `position_embeddings`, masks, ...), so nothing
depends on a layer's argument list. For each block i: forward hooks on its Linear layers
accumulate the method's statistics over the calibration tokens, the Linears are pruned, and
the pruned block is re-run to produce the inputs of block i+1. Memory: the model plus one
block boundary's calibration activations. Embeddings and `lm_head` stay dense.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm import tqdm

from ..methods import PRUNE_METHODS as METHODS
from ..methods import needs_calibration
from .magnitude import magnitude_mask
from .masks import Structure, nm_violations
from .sparsegpt import Hessian, sparsegpt_prune
from .wanda import InputNorms, wanda_mask


@dataclass(frozen=True)
class PruneSettings:
    """method: magnitude | wanda | sparsegpt; sparsity in [0, 1); structure unstructured or N:M."""

    method: str
    sparsity: float
    structure: Structure = field(default_factory=Structure)
    batch_size: int = 8
    blocksize: int = 128
    percdamp: float = 0.01

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown pruning method {self.method!r}; known: {', '.join(METHODS)}")
        if not 0.0 <= self.sparsity < 1.0:
            raise ValueError(f"sparsity must be in [0, 1), got {self.sparsity}")
        if self.structure.is_nm and abs(self.sparsity - self.structure.sparsity) > 1e-9:
            raise ValueError(
                f"structure {self.structure} implies sparsity {self.structure.sparsity:g}, "
                f"got {self.sparsity:g}"
            )


class _Captured(Exception):
    """Raised by the pre-hook to stop the forward pass once block 0's inputs are known."""

    def __init__(self, args, kwargs):
        self.args, self.kwargs = args, kwargs


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of decoder blocks: the ModuleList with num_hidden_layers entries."""
    n = getattr(model.config, "num_hidden_layers", None)
    for _, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return module
    raise ValueError(f"cannot find the {n} decoder layers of {type(model).__name__}")


def prunable_linears(layer: nn.Module) -> dict[str, nn.Linear]:
    """The Linear layers of one block, by their name inside it."""
    return {name: m for name, m in layer.named_modules() if isinstance(m, nn.Linear)}


def _with_hidden(args, kwargs, hidden):
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


@torch.inference_mode()
def capture_block_inputs(model: nn.Module, windows: torch.Tensor, batch_size: int) -> list[tuple]:
    """(args, kwargs) that the first decoder block receives, one entry per calibration batch."""
    layers = decoder_layers(model)
    device = next(model.parameters()).device
    captured = []

    def stop(module, args, kwargs):
        raise _Captured(args, kwargs)

    handle = layers[0].register_forward_pre_hook(stop, with_kwargs=True)
    try:
        for i in range(0, windows.shape[0], batch_size):
            try:
                model(input_ids=windows[i : i + batch_size].to(device), use_cache=False)
            except _Captured as c:
                captured.append((c.args, c.kwargs))
    finally:
        handle.remove()
    return captured


def _block_output(out):
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.inference_mode()
def compress_blockwise(
    model: nn.Module,
    windows: torch.Tensor | None,
    batch_size: int,
    statistic: type | None,
    compress: Callable[[nn.Linear, object], dict],
    desc: str,
    progress: bool = True,
) -> dict[str, dict]:
    """Compress every Linear of every decoder block in place, block by block; return
    {full layer name: what `compress` reported for it}.

    statistic: None (no calibration data: `windows` unused), or a class built as
      statistic(in_features, device) with .add(x) that accumulates each Linear's inputs
      (`wanda.InputNorms`, `sparsegpt.Hessian`). Block i's statistics come from its inputs as
      produced by the already compressed blocks 0..i-1.
    compress(linear, its statistic or None): changes linear.weight in place, returns a dict.
    Used by pruning (prune_model) and quantization (quantization.quantize_model).
    """
    layers = decoder_layers(model)
    if statistic is not None and (windows is None or windows.numel() == 0):
        raise ValueError(f"{desc}: needs calibration windows")
    inputs = capture_block_inputs(model, windows, batch_size) if statistic is not None else []
    prefix = _prefix(model, layers)
    reports: dict[str, dict] = {}
    bar = tqdm(total=len(layers), desc=desc, disable=not progress)
    for i, layer in enumerate(layers):
        linears = prunable_linears(layer)
        stats = _collect(layer, linears, inputs, statistic) if statistic is not None else {}
        for name, lin in linears.items():
            reports[f"{prefix}.{i}.{name}"] = compress(lin, stats.get(name))
        stats.clear()
        if statistic is not None:
            for j, (args, kwargs) in enumerate(inputs):
                out = _block_output(layer(*args, **kwargs))
                inputs[j] = _with_hidden(args, kwargs, out)
        bar.update(1)
    bar.close()
    return reports


@torch.inference_mode()
def prune_model(
    model: nn.Module, windows: torch.Tensor | None, settings: PruneSettings, progress: bool = True
) -> dict:
    """Prune `model` in place; return a report (per-layer measured sparsity, N:M check, timing).

    windows: [n, seq_len] calibration token ids (unused by magnitude, may be None then).
    """
    t0 = time.perf_counter()
    needs_data = needs_calibration(settings.method) and settings.sparsity > 0
    statistic = None
    if needs_data:
        statistic = InputNorms if settings.method == "wanda" else Hessian

    def prune(lin: nn.Linear, stat) -> dict:
        if settings.sparsity > 0:
            _prune_linear(lin, stat, settings)
        w = lin.weight
        return {
            "zeros": int((w == 0).sum()),
            "numel": w.numel(),
            "sparsity": float((w == 0).float().mean()),
            "nm_violations": nm_violations(w, settings.structure.n, settings.structure.m)
            if settings.structure.is_nm
            else 0,
        }

    per_layer = compress_blockwise(
        model,
        windows,
        settings.batch_size,
        statistic,
        prune,
        f"prune {settings.method} {settings.sparsity:g} {settings.structure}",
        progress,
    )
    zeros = sum(v["zeros"] for v in per_layer.values())
    numel = sum(v["numel"] for v in per_layer.values())
    return {
        "method": settings.method,
        "structure": str(settings.structure),
        "target_sparsity": settings.sparsity,
        "measured_sparsity": zeros / numel,
        "pruned_parameters": numel,
        "nm_violations": sum(v["nm_violations"] for v in per_layer.values()),
        "layers": per_layer,
        "seconds": round(time.perf_counter() - t0, 2),
        "calibration_windows": None if windows is None else list(windows.shape),
    }


def _prefix(model, layers) -> str:
    for name, module in model.named_modules():
        if module is layers:
            return name
    return "layers"


def _collect(layer, linears, inputs, statistic) -> dict:
    """Run the block on every calibration batch, accumulating each Linear's input statistics."""
    device = next(layer.parameters()).device
    stats = {name: statistic(lin.in_features, device) for name, lin in linears.items()}
    handles = [
        lin.register_forward_hook(lambda m, a, o, s=stats[name]: s.add(a[0]))
        for name, lin in linears.items()
    ]
    try:
        for args, kwargs in inputs:
            layer(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return stats


def _prune_linear(lin: nn.Linear, stat, settings: PruneSettings) -> None:
    w = lin.weight.data
    if settings.method == "magnitude":
        mask = magnitude_mask(w, settings.sparsity, settings.structure)
        w.masked_fill_(mask, 0)
    elif settings.method == "wanda":
        mask = wanda_mask(w, stat.sq, settings.sparsity, settings.structure)
        w.masked_fill_(mask, 0)
    else:
        new, _ = sparsegpt_prune(
            w,
            stat.value,
            settings.sparsity,
            settings.structure,
            settings.blocksize,
            settings.percdamp,
        )
        w.copy_(new)


def check_report(report: dict, tolerance: float = 0.001) -> None:
    """Raise if the measured sparsity misses the target by more than `tolerance` or N:M is
    violated."""
    miss = abs(report["measured_sparsity"] - report["target_sparsity"])
    if miss > tolerance:
        raise ValueError(
            f"measured sparsity {report['measured_sparsity']:.5f} misses the target "
            f"{report['target_sparsity']:.5f} by {100 * miss:.3f} percentage points "
            f"(> {100 * tolerance:.3f})"
        )
    if report["nm_violations"]:
        bad = [k for k, v in report["layers"].items() if v["nm_violations"]][:5]
        raise ValueError(
            f"{report['nm_violations']} groups violate {report['structure']} (e.g. in {bad})"
        )
