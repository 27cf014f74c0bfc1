"""Weight quantization: round-to-nearest (RTN) and GPTQ (Frantar et al., 2023), on a per-group
uniform grid; the weights are kept dequantized, in the model's dtype.

The grid of one group (`group_size` consecutive input columns of one output row; -1: the whole
row, per channel) with b bits has 2^b levels, maxq = 2^b - 1:
  asymmetric  lo = min(w, 0), hi = max(w, 0)   scale = (hi - lo) / maxq   zero = round(-lo / scale)
  symmetric   hi = max|w|, lo = -hi            scale = 2 hi / maxq        zero = (maxq + 1) / 2
(a group of zeros gets lo = -1, hi = 1), and a weight w becomes
  q = clamp(round(w / scale) + zero, 0, maxq),    w' = scale (q - zero).
RTN applies it to every group of the weight as it is. GPTQ quantizes the columns left to right
and spreads each column's error over the columns not yet quantized with the inverse Hessian of
the calibration inputs (H = 2 X X^T / n, the SparseGPT machinery: `blockwise.Hessian`,
`blockwise.inverse_hessian_factor`), in blocks of `blocksize` columns with lazy updates of the
rest. A group's grid is fixed when its first column is reached, from the weights as updated so
far; with `act_order` the columns go in order of decreasing H_jj and every group's grid is fixed
up front from the original weights (static groups; `static_groups` alone does only that, which
is what llm-compressor does), so the groups stay the original column ranges either way and
`distinct_per_group` can check every one. GPTQ works in float64 (the Hessian, its factor, the
weights as updated and their grids; as SparseGPT does, for the same reason: a float32 sum's last
bits depend on the thread count and the CPU, and flip roundings that the updates then carry on);
RTN in float32, which is exact enough for it: it sums nothing.

`quantize_model` applies either to every Linear of the decoder blocks, block by block
(`blockwise.compress_blockwise`, the walker pruning uses: GPTQ's Hessians of block i
come from the inputs that the quantized blocks 0..i-1 produce); embeddings and lm_head stay as
they are. A grid is named in paths and logs by its structure string, e.g. int4-g128.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from benchmark_illusion.compression.blockwise import (
    Hessian,
    compress_blockwise,
    float64_device,
    inverse_hessian_factor,
)
from benchmark_illusion.compression.methods import QUANT_METHODS as METHODS
from benchmark_illusion.compression.methods import needs_calibration
from benchmark_illusion.compression.structures import Grid


def _working(w: torch.Tensor) -> torch.Tensor:
    """w as it is if float64 (GPTQ's working precision), else as float32 (RTN's)."""
    return w if w.dtype == torch.float64 else w.float()


def grid_params(w: torch.Tensor, grid: Grid) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero), each [rows, 1], of the grid that covers each row of `w` [rows, g]; float64
    for a float64 `w`, else float32."""
    w = _working(w)
    lo = torch.clamp(w.min(dim=1, keepdim=True).values, max=0.0)
    hi = torch.clamp(w.max(dim=1, keepdim=True).values, min=0.0)
    if grid.symmetric:
        hi = torch.maximum(-lo, hi)
        lo = -hi
    empty = (lo == 0) & (hi == 0)
    lo = torch.where(empty, -1.0, lo)
    hi = torch.where(empty, 1.0, hi)
    scale = (hi - lo) / grid.maxq
    if grid.symmetric:
        zero = torch.full_like(scale, (grid.maxq + 1) / 2)
    else:
        zero = torch.round(-lo / scale)
    return scale, zero


def on_grid(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, maxq: int) -> torch.Tensor:
    """w [rows, g] rounded onto the grid (scale, zero), dequantized; float64 for a float64 `w`,
    else float32."""
    q = torch.clamp(torch.round(_working(w) / scale) + zero, 0, maxq)
    return scale * (q - zero)


def rtn(weight: torch.Tensor, grid: Grid) -> torch.Tensor:
    """Round to nearest, group by group; returns the dequantized weight in weight's dtype."""
    w = weight.detach().float()
    out = torch.empty_like(w)
    g = grid.width(w.shape[1])
    for c0 in range(0, w.shape[1], g):
        part = w[:, c0 : c0 + g]
        scale, zero = grid_params(part, grid)
        out[:, c0 : c0 + g] = on_grid(part, scale, zero, grid.maxq)
    return out.to(weight.dtype)


def gptq(
    weight: torch.Tensor,
    h: torch.Tensor,
    grid: Grid,
    blocksize: int = 128,
    percdamp: float = 0.01,
    act_order: bool = False,
    static_groups: bool = False,
) -> torch.Tensor:
    """GPTQ of one Linear weight [out, in] given the Hessian h [in, in] of its inputs; returns the
    dequantized weight in weight's dtype and on its device, computed in float64 (module
    docstring) on `blockwise.float64_device`.

    static_groups: fix every group's grid up front from the original weights (as act_order
    does, and as llm-compressor does) instead of when the group's first column is reached."""
    w = weight.detach().to(float64_device(weight.device), torch.float64, copy=True)
    rows, cols = w.shape
    g = grid.width(cols)
    h = h.to(w.device, torch.float64)
    u, dead = inverse_hessian_factor(h, percdamp)
    w[:, dead] = 0.0
    # the grid of every group (original column ranges): fixed up front with act_order, else
    # when the group's first column is reached
    scale = torch.zeros((rows, cols), dtype=torch.float64, device=w.device)
    zero = torch.zeros((rows, cols), dtype=torch.float64, device=w.device)
    fixed = [False] * cols

    def fix(c0: int, source: torch.Tensor) -> None:
        s, z = grid_params(source, grid)
        scale[:, c0 : c0 + g], zero[:, c0 : c0 + g] = s, z
        fixed[c0 : c0 + g] = [True] * len(fixed[c0 : c0 + g])

    order = torch.arange(cols, device=w.device)
    if act_order or static_groups:
        for c0 in range(0, cols, g):
            fix(c0, w[:, c0 : c0 + g])
    if act_order:
        order = torch.argsort(torch.diagonal(h), descending=True, stable=True)
        hp = h[order][:, order]
        u, _ = inverse_hessian_factor(hp, percdamp)
        w = w[:, order]
        scale, zero = scale[:, order], zero[:, order]
    original = order.tolist()  # column positions -> original columns, without a sync per column
    q = torch.zeros_like(w)
    for b0 in range(0, cols, blocksize):
        b1 = min(b0 + blocksize, cols)
        wb = w[:, b0:b1].clone()
        ub = u[b0:b1, b0:b1]
        err = torch.zeros_like(wb)
        for j in range(b1 - b0):
            col = b0 + j
            orig = original[col]
            if not fixed[orig]:  # not act_order: a group starts here (columns in order)
                rest = torch.cat([wb[:, j:], w[:, b1:]], dim=1)
                s, z = grid_params(rest[:, :g], grid)
                scale[:, col : col + g], zero[:, col : col + g] = s, z
                fixed[orig : orig + g] = [True] * len(fixed[orig : orig + g])
            x = wb[:, j]
            qx = on_grid(x[:, None], scale[:, col : col + 1], zero[:, col : col + 1], grid.maxq)
            q[:, col] = qx[:, 0]
            e = (x - qx[:, 0]) / ub[j, j]
            wb[:, j:] -= e[:, None] * ub[j, j:][None, :]
            err[:, j] = e
        w[:, b1:] -= err @ u[b0:b1, b1:]
    if act_order:
        q = q[:, torch.argsort(order)]
    return q.to(weight.device, weight.dtype)


def distinct_per_group(weight: torch.Tensor, grid: Grid) -> torch.Tensor:
    """Number of distinct values in every group of `weight` [rows, groups]: at most 2^bits when
    the weight is on its grid."""
    w = weight.detach()
    g = grid.width(w.shape[1])
    counts = []
    for c0 in range(0, w.shape[1], g):
        part = w[:, c0 : c0 + g]
        s = torch.sort(part, dim=1).values
        counts.append(1 + (s[:, 1:] != s[:, :-1]).sum(1))
    return torch.stack(counts, dim=1)


@dataclass(frozen=True)
class QuantizeSettings:
    """method: rtn | gptq; the grid; GPTQ's calibration batch size, block size, dampening and
    activation order (unused by RTN)."""

    method: str
    grid: Grid = field(default_factory=Grid)
    batch_size: int = 8
    blocksize: int = 128
    percdamp: float = 0.01
    act_order: bool = False
    static_groups: bool = False

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(
                f"unknown quantization method {self.method!r}; known: {', '.join(METHODS)}"
            )
        if self.blocksize < 1 or not 0 < self.percdamp < 1 or self.batch_size < 1:
            raise ValueError(
                f"need blocksize >= 1, batch_size >= 1 and percdamp in (0, 1), got {self}"
            )

    @classmethod
    def from_params(cls, params: dict, method: str, structure: str) -> QuantizeSettings:
        """The settings of one grid point from the quantize rule's params (params.quantize:
        GPTQ's settings only for gptq) and the grid its structure names; raises ValueError."""
        from benchmark_illusion.compression.structures import parse_grid

        kwargs = {}
        if method == "gptq":
            g = params["gptq"]
            kwargs.update(
                batch_size=params["batch_size"],
                blocksize=g["blocksize"],
                percdamp=g["percdamp"],
                act_order=g["act_order"],
                static_groups=g["static_groups"],
            )
        return cls(method, parse_grid(structure), **kwargs)


@torch.inference_mode()
def quantize_model(
    model: nn.Module,
    windows: torch.Tensor | None,
    settings: QuantizeSettings,
    progress: bool = True,
) -> dict:
    """Quantize every Linear of the decoder blocks in place (embeddings and lm_head kept, as in
    pruning); return the report that quantization.json stores: the grid, per layer the number of
    groups, the distinct values per group (at most 2^bits on the grid) and the relative change
    ||W' - W||_F / ||W||_F, totals and timing.

    windows: [n, seq_len] calibration token ids (GPTQ's Hessians; unused by RTN).
    """
    t0 = time.perf_counter()
    grid = settings.grid

    def quantize(lin: nn.Linear, stat) -> dict:
        w = lin.weight.data
        if settings.method == "rtn":
            new = rtn(w, grid)
        else:
            new = gptq(
                w,
                stat.value,
                grid,
                settings.blocksize,
                settings.percdamp,
                settings.act_order,
                settings.static_groups,
            )
        change = float((new.float() - w.float()).norm() / w.float().norm().clamp_min(1e-12))
        w.copy_(new)
        counts = distinct_per_group(w, grid)
        return {
            "numel": w.numel(),
            "groups": counts.numel(),
            "max_distinct_per_group": int(counts.max()),
            "mean_distinct_per_group": round(float(counts.float().mean()), 3),
            "off_grid_groups": int((counts > 2**grid.bits).sum()),
            "relative_change": round(change, 6),
        }

    per_layer = compress_blockwise(
        model,
        windows,
        settings.batch_size,
        Hessian if settings.method == "gptq" else None,
        quantize,
        f"quantize {settings.method} {grid}",
        progress,
    )
    total = lambda key: sum(v[key] for v in per_layer.values())  # noqa: E731
    return {
        "method": settings.method,
        "structure": str(grid),
        "bits": grid.bits,
        "group_size": grid.group_size,
        "symmetric": grid.symmetric,
        "act_order": settings.act_order if settings.method == "gptq" else None,
        "static_groups": settings.static_groups if settings.method == "gptq" else None,
        "levels": 2**grid.bits,
        "quantized_parameters": total("numel"),
        "groups": total("groups"),
        "max_distinct_per_group": max(v["max_distinct_per_group"] for v in per_layer.values()),
        "off_grid_groups": total("off_grid_groups"),
        "layers": per_layer,
        "seconds": round(time.perf_counter() - t0, 2),
        "calibration_windows": None
        if windows is None or not needs_calibration(settings.method)
        else list(windows.shape),
    }


def check_report(report: dict) -> None:
    """Raise if any group holds more distinct values than its grid has levels."""
    if report["off_grid_groups"]:
        bad = [k for k, v in report["layers"].items() if v["off_grid_groups"]][:5]
        raise ValueError(
            f"{report['off_grid_groups']} groups hold more than {report['levels']} distinct "
            f"values: not on a {report['bits']}-bit grid (e.g. in {bad})"
        )
