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

from contextlib import contextmanager

import torch

from .masks import Structure, float64_device, lowest_n_of_m, lowest_per_matrix


class Hessian:
    """Running H = 2 X X^T / n of one Linear layer's inputs, float64 [in, in] on the inputs'
    device (`masks.float64_device`)."""

    def __init__(self, in_features: int, device):
        shape, home = (in_features, in_features), float64_device(device)
        self.sum = torch.zeros(shape, dtype=torch.float64, device=home)
        self.tokens = 0

    def add(self, x: torch.Tensor) -> None:
        """x: [..., in] inputs of the layer (any float dtype; products and sums in float64)."""
        x = x.reshape(-1, x.shape[-1]).to(self.sum.device, torch.float64)
        self.sum += x.T @ x
        self.tokens += x.shape[0]

    @property
    def value(self) -> torch.Tensor:
        return 2.0 * self.sum / max(self.tokens, 1)


@contextmanager
def one_thread_on_cpu(device: torch.device):
    """torch (and its LAPACK) at one thread for the block, on the CPU: a blocked Cholesky
    factor's last bits depend on the number of threads that share it."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def inverse_hessian_factor(h: torch.Tensor, percdamp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(U, dead): U the upper Cholesky factor of (H + damping)^-1, dead the [in] mask of
    H_jj = 0; U in float64, factorized at one thread on the CPU (`one_thread_on_cpu`)."""
    h = h.detach().to(torch.float64, copy=True)
    diag = torch.diagonal(h)
    dead = diag == 0
    diag[dead] = 1.0
    diag += percdamp * diag.mean()
    with one_thread_on_cpu(h.device):
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
    (True = pruned), both on weight's device. Computed in float64 (module docstring) on
    `masks.float64_device`."""
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
