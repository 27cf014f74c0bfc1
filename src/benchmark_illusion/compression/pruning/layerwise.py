"""Prune a causal LM block by block: the settings, each Linear's pruning and the report; the
walk over the blocks is `compression.blockwise.compress_blockwise` (shared with quantization).
Embeddings and `lm_head` stay dense.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from ..blockwise import Hessian, compress_blockwise
from ..methods import PRUNE_METHODS as METHODS
from ..methods import needs_calibration
from .magnitude import magnitude_mask
from .masks import Structure, nm_violations
from .sparsegpt import sparsegpt_prune
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

    @classmethod
    def from_params(cls, params: dict, method: str, structure: str, sparsity: float):
        """The settings of one grid point from the prune rule's params (params.prune: the batch
        size only for methods with calibration data, sparsegpt's settings only for sparsegpt);
        raises ValueError for an inconsistent combination."""
        from benchmark_illusion.compression.structures import parse_structure

        kwargs = {}
        if needs_calibration(method):
            kwargs["batch_size"] = params["batch_size"]
        if method == "sparsegpt":
            g = params["sparsegpt"]
            kwargs.update(blocksize=g["blocksize"], percdamp=g["percdamp"])
        return cls(method=method, sparsity=sparsity, structure=parse_structure(structure), **kwargs)


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
