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
the calibration inputs (H = 2 X X^T / n, the SparseGPT machinery: `sparsegpt.Hessian`,
`sparsegpt.inverse_hessian_factor`), in blocks of `blocksize` columns with lazy updates of the
rest. A group's grid is fixed when its first column is reached, from the weights as updated so
far; with `act_order` the columns go in order of decreasing H_jj and every group's grid is fixed
up front from the original weights (static groups), so the groups stay the original column
ranges either way and `distinct_per_group` can check every one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .pruning.sparsegpt import inverse_hessian_factor

BITS = (2, 3, 4, 8)


@dataclass(frozen=True)
class Grid:
    """bits per weight; group_size input columns per grid (-1: one grid per output row);
    symmetric or asymmetric."""

    bits: int = 4
    group_size: int = 128
    symmetric: bool = False

    def __post_init__(self):
        if self.bits not in BITS:
            raise ValueError(f"bits must be one of {BITS}, got {self.bits}")
        if self.group_size != -1 and self.group_size < 1:
            raise ValueError(f"group_size must be -1 (per channel) or >= 1, got {self.group_size}")

    @property
    def maxq(self) -> int:
        return 2**self.bits - 1

    def width(self, cols: int) -> int:
        """Columns per group of a weight with `cols` input columns."""
        return cols if self.group_size == -1 else min(self.group_size, cols)


def grid_params(w: torch.Tensor, grid: Grid) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero), each [rows, 1], of the grid that covers each row of `w` [rows, g]."""
    w = w.float()
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
    """w [rows, g] rounded onto the grid (scale, zero), dequantized, fp32."""
    q = torch.clamp(torch.round(w.float() / scale) + zero, 0, maxq)
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
) -> torch.Tensor:
    """GPTQ of one Linear weight [out, in] given the Hessian h [in, in] of its inputs; returns the
    dequantized weight in weight's dtype."""
    w = weight.detach().float().clone()
    rows, cols = w.shape
    g = grid.width(cols)
    u, dead = inverse_hessian_factor(h.float(), percdamp)
    w[:, dead] = 0.0
    # the grid of every group (original column ranges): fixed up front with act_order, else
    # when the group's first column is reached
    scale = torch.zeros((rows, cols), dtype=torch.float32)
    zero = torch.zeros((rows, cols), dtype=torch.float32)
    fixed = torch.zeros(cols, dtype=torch.bool)

    def fix(c0: int, source: torch.Tensor) -> None:
        s, z = grid_params(source, grid)
        scale[:, c0 : c0 + g], zero[:, c0 : c0 + g] = s, z
        fixed[c0 : c0 + g] = True

    order = torch.arange(cols)
    if act_order:
        for c0 in range(0, cols, g):
            fix(c0, w[:, c0 : c0 + g])
        order = torch.argsort(torch.diagonal(h.float()), descending=True, stable=True)
        hp = h.float()[order][:, order]
        u, _ = inverse_hessian_factor(hp, percdamp)
        w = w[:, order]
        scale, zero = scale[:, order], zero[:, order]
    q = torch.zeros_like(w)
    for b0 in range(0, cols, blocksize):
        b1 = min(b0 + blocksize, cols)
        wb = w[:, b0:b1].clone()
        ub = u[b0:b1, b0:b1]
        err = torch.zeros_like(wb)
        for j in range(b1 - b0):
            col = b0 + j
            orig = int(order[col])
            if not fixed[orig]:  # not act_order: a group starts here (columns in order)
                rest = torch.cat([wb[:, j:], w[:, b1:]], dim=1)
                s, z = grid_params(rest[:, :g], grid)
                scale[:, col : col + g], zero[:, col : col + g] = s, z
                fixed[orig : orig + g] = True
            x = wb[:, j]
            qx = on_grid(x[:, None], scale[:, col : col + 1], zero[:, col : col + 1], grid.maxq)
            q[:, col] = qx[:, 0]
            e = (x - qx[:, 0]) / ub[j, j]
            wb[:, j:] -= e[:, None] * ub[j, j:][None, :]
            err[:, j] = e
        w[:, b1:] -= err @ u[b0:b1, b1:]
    if act_order:
        q = q[:, torch.argsort(order)]
    return q.to(weight.dtype)


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
