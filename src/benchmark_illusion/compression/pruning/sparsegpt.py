"""SparseGPT (Frantar & Alistarh, 2023): prune and reconstruct with optimal-brain-surgeon updates.

For a Linear layer with weight W [out, in] and calibration inputs X [in, n]:
  H = 2 X X^T / n, accumulated in fp32; dead inputs (H_jj = 0) get H_jj = 1 and W[:, j] = 0;
  H += lambda * I with lambda = percdamp * mean(diag(H));
  U = upper Cholesky factor of H^-1 (so the inverse Hessians of the remaining columns are
  read off U's rows as columns are eliminated left to right).
Columns are processed in blocks of `blocksize`. In each block the mask is chosen by
w^2 / U_jj^2 (unstructured: the lowest fraction of the block; N:M: the N lowest of every M
columns of a row, decided when the group's first column is reached). Each pruned column's
error is spread over the block's later columns, and the block's accumulated error over all
later columns.
"""

from __future__ import annotations

import torch

from .masks import Structure, lowest_n_of_m, lowest_per_matrix


class Hessian:
    """Running H = 2 X X^T / n of one Linear layer's inputs, fp32 [in, in]."""

    def __init__(self, in_features: int, device):
        self.sum = torch.zeros((in_features, in_features), dtype=torch.float32, device=device)
        self.tokens = 0

    def add(self, x: torch.Tensor) -> None:
        """x: [..., in] inputs of the layer."""
        x = x.reshape(-1, x.shape[-1]).float()
        self.sum += x.T @ x
        self.tokens += x.shape[0]

    @property
    def value(self) -> torch.Tensor:
        return 2.0 * self.sum / max(self.tokens, 1)


def inverse_hessian_factor(h: torch.Tensor, percdamp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(U, dead): U the upper Cholesky factor of (H + damping)^-1, dead the [in] mask of
    H_jj = 0."""
    h = h.clone()
    diag = torch.diagonal(h)
    dead = diag == 0
    diag[dead] = 1.0
    diag += percdamp * diag.mean()
    lower = torch.linalg.cholesky(h)
    h_inv = torch.cholesky_inverse(lower)
    return torch.linalg.cholesky(h_inv, upper=True), dead


def sparsegpt_prune(
    weight: torch.Tensor,
    h: torch.Tensor,
    sparsity: float,
    structure: Structure,
    blocksize: int = 128,
    percdamp: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pruned and reconstructed weight [out, in] (in weight's dtype) and its bool mask
    (True = pruned)."""
    if structure.is_nm and blocksize % structure.m:
        raise ValueError(f"blocksize {blocksize} must be a multiple of M={structure.m}")
    w = weight.detach().float().clone()
    rows, cols = w.shape
    u, dead = inverse_hessian_factor(h.float(), percdamp)
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
    return w.to(weight.dtype), mask
