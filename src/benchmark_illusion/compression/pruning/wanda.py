"""Wanda (Sun et al., 2023): prune by |W_ij| * ||X_j||_2, compared within each output row.

X_j is input feature j over all calibration tokens; only its squared norm is accumulated, in
float64, and the scores are float64 too: a float32 sum's last bits depend on the order the
thread count and the CPU give it, and would flip the near-ties of a row's ranking.
"""

from __future__ import annotations

import torch

from ..blockwise import float64_device
from .masks import Structure, lowest_n_of_m, lowest_per_row


class InputNorms:
    """Running sum of squared input features of one Linear layer: ||X_j||^2, float64 [in] on the
    inputs' device (`blockwise.float64_device`)."""

    def __init__(self, in_features: int, device):
        self.sq = torch.zeros(in_features, dtype=torch.float64, device=float64_device(device))
        self.tokens = 0

    def add(self, x: torch.Tensor) -> None:
        """x: [..., in] inputs of the layer (any float dtype; squares and sums in float64)."""
        x = x.reshape(-1, x.shape[-1]).to(self.sq.device, torch.float64)
        self.sq += (x * x).sum(0)
        self.tokens += x.shape[0]


def wanda_scores(weight: torch.Tensor, sq_norms: torch.Tensor) -> torch.Tensor:
    """|W| * ||X_j||_2 for weight [out, in] and squared input norms [in], float64 on the norms'
    device."""
    w = weight.detach().abs().to(sq_norms.device, torch.float64)
    return w * sq_norms.double().sqrt()[None, :]


def wanda_mask(
    weight: torch.Tensor, sq_norms: torch.Tensor, sparsity: float, structure: Structure
) -> torch.Tensor:
    """Bool mask [out, in] on weight's device, True = prune."""
    scores = wanda_scores(weight, sq_norms)
    if structure.is_nm:
        return lowest_n_of_m(scores, structure.n, structure.m).to(weight.device)
    return lowest_per_row(scores, sparsity).to(weight.device)
