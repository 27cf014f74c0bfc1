"""SparseGPT (Frantar & Alistarh, 2023): prune and reconstruct with optimal-brain-surgeon updates.

For a Linear layer with weight W [out, in] and calibration inputs X [in, n]:
  H = 2 X X^T / n, accumulated in float64; dead inputs (H_jj = 0) get H_jj = 1 and W[:, j] = 0;
  H += lambda * I with lambda = percdamp * mean(diag(H));
  U = upper Cholesky factor of H^-1 (so the inverse Hessians of the remaining columns are
  read off U's rows as columns are eliminated left to right).
Columns are processed in blocks of `blocksize`. In each block the mask is chosen by
w^2 / U_jj^2 (unstructured: the lowest fraction of the block; N:M: the N lowest of every M
columns of a row, decided when the group's first column is reached). Each pruned column's
error is spread over the block's later columns, and the block's accumulated error over all
later columns.

Precision: H, its factor, the mask scores and the working copy of W are float64 whatever the
model's dtype; only the returned weight is cast back. The order of a sum depends on the thread
count and the CPU, and one near-tie of the mask flipped by it moves every later update of its
row; float64 makes such differences about 2^29 times smaller than float32. LAPACK's blocked
Cholesky factor differs in its last bits between thread counts even in float64, and a weight
that then rounds to float32 the other way changes the next blocks' inputs, so on the CPU the
factor is computed at one thread. Among equal scores the mask prunes the first position
(`masks`: stable sorts).
"""

from __future__ import annotations

import torch

from ..blockwise import float64_device, inverse_hessian_factor
from .masks import Structure, lowest_n_of_m, lowest_per_matrix


def sparsegpt_prune(
    weight: torch.Tensor,
    h: torch.Tensor,
    sparsity: float,
    structure: Structure,
    blocksize: int = 128,
    percdamp: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pruned and reconstructed weight [out, in] (in weight's dtype) and its bool mask
    (True = pruned), both on weight's device. Computed in float64 (module docstring) on
    `blockwise.float64_device`."""
    if structure.is_nm and blocksize % structure.m:
        raise ValueError(f"blocksize {blocksize} must be a multiple of M={structure.m}")
    w = weight.detach().to(float64_device(weight.device), torch.float64, copy=True)
    rows, cols = w.shape
    u, dead = inverse_hessian_factor(h.to(w.device), percdamp)
    w[:, dead] = 0.0
    mask = torch.zeros_like(w, dtype=torch.bool)

    for b0 in range(0, cols, blocksize):
        b1 = min(b0 + blocksize, cols)
        wb = w[:, b0:b1].clone()
        ub = u[b0:b1, b0:b1]
        d = torch.diagonal(ub)
        err = torch.zeros_like(wb)
        if structure.is_nm:
            mb = torch.zeros_like(wb, dtype=torch.bool)
        else:
            mb = lowest_per_matrix(wb * wb / (d * d)[None, :], sparsity)
        for j in range(b1 - b0):
            if structure.is_nm and j % structure.m == 0:
                g = slice(j, j + structure.m)
                mb[:, g] = lowest_n_of_m(
                    wb[:, g] ** 2 / (d[g] ** 2)[None, :], structure.n, structure.m
                )
            col = wb[:, j]
            kept = col.masked_fill(mb[:, j], 0.0)
            e = (col - kept) / d[j]
            wb[:, j:] -= e[:, None] * ub[j, j:][None, :]
            wb[:, j] = kept  # exact zeros where pruned (the update leaves rounding residue)
            err[:, j] = e
        w[:, b0:b1] = wb
        mask[:, b0:b1] = mb
        w[:, b1:] -= err @ u[b0:b1, b1:]
    return w.to(weight.device, weight.dtype), mask.to(weight.device)
