"""Mask selection from importance scores. A mask is a bool tensor, True = weight is pruned (zeroed).

Structures:
  unstructured   a fraction `sparsity` of the weights, chosen by the method's comparison group
  N:M            in every group of M consecutive input weights of a row, exactly N are pruned
                 (sparsity N/M; "2:4" prunes 2 of every 4, NVIDIA's sparse tensor core layout)

Ties: every selection prunes what a stable sort puts first, so among equal scores the first
position (row-major) goes first. torch.topk leaves the choice among ties to its implementation,
which differs between CPU and GPU kernels and sizes; weights imported from a quantized file have
many equal |W|, so this decides real masks.
"""

from __future__ import annotations

import torch

from ..structures import Structure, parse_structure

__all__ = [
    "Structure",
    "lowest_n_of_m",
    "lowest_per_matrix",
    "lowest_per_row",
    "n_pruned",
    "nm_violations",
    "parse_structure",
]


def n_pruned(count: int, sparsity: float) -> int:
    """How many of `count` weights a target sparsity prunes (rounded to nearest)."""
    return int(round(count * sparsity))


def lowest_per_matrix(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune the lowest-scoring `sparsity` fraction of the whole matrix (one threshold; ties:
    the first positions in row-major order)."""
    k = n_pruned(scores.numel(), sparsity)
    flat = scores.flatten()
    if not k:
        return torch.zeros_like(scores, dtype=torch.bool)
    # what a stable sort's first k are, without sorting: everything below the k-th lowest score,
    # then as many of the scores equal to it as are still missing, first positions first
    kth = torch.kthvalue(flat, k).values
    below, tied = flat < kth, flat == kth
    missing = k - below.sum()
    return (below | (tied & (torch.cumsum(tied, 0) <= missing))).view_as(scores)


def lowest_per_row(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Prune the lowest-scoring `sparsity` fraction of every row ([out, in] scores).

    The matrix total round(out * in * sparsity) is met exactly: rows prune either
    floor or ceil of the per-row share (the first rows take the remainder), so a small
    input dimension cannot push the measured sparsity off target by rounding.
    """
    rows, cols = scores.shape
    total = n_pruned(rows * cols, sparsity)
    counts = torch.full((rows,), total // rows, device=scores.device)
    counts[: total % rows] += 1
    # rank of each score within its row: 0 = lowest (stable, so ties break by position)
    order = torch.argsort(scores, dim=1, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(
        1, order, torch.arange(cols, device=scores.device).expand(rows, cols).contiguous()
    )
    return ranks < counts[:, None]


def lowest_n_of_m(scores: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """In every group of m consecutive columns of each row, prune the n lowest scores (ties: the
    first columns of the group)."""
    rows, cols = scores.shape
    if cols % m:
        raise ValueError(f"N:M needs the input dimension ({cols}) to be a multiple of M={m}")
    groups = scores.reshape(rows, cols // m, m)
    mask = torch.zeros_like(groups, dtype=torch.bool)
    mask.scatter_(2, torch.argsort(groups, dim=2, stable=True)[..., :n], True)
    return mask.reshape(rows, cols)


def nm_violations(weight: torch.Tensor, n: int, m: int) -> int:
    """Number of M-groups of a [out, in] weight with fewer than N zeros."""
    rows, cols = weight.shape
    zeros = (weight.reshape(rows, cols // m, m) == 0).sum(-1)
    return int((zeros < n).sum())
