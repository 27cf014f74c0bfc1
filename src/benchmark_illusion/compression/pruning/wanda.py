"""Wanda (Sun et al., 2023): prune by |W_ij| * ||X_j||_2, compared within each output row.

X_j is input feature j over all calibration tokens; only its squared norm is accumulated.
"""

from __future__ import annotations

import torch

from .masks import Structure, lowest_n_of_m, lowest_per_row


class InputNorms:
    """Running sum of squared input features of one Linear layer: ||X_j||^2, fp32 [in]."""

    def __init__(self, in_features: int, device):
        self.sq = torch.zeros(in_features, dtype=torch.float32, device=device)
        self.tokens = 0

    def add(self, x: torch.Tensor) -> None:
        """x: [..., in] inputs of the layer."""
        x = x.reshape(-1, x.shape[-1]).float()
        self.sq += (x * x).sum(0)
        self.tokens += x.shape[0]


def wanda_scores(weight: torch.Tensor, sq_norms: torch.Tensor) -> torch.Tensor:
    """|W| * ||X_j||_2 for weight [out, in] and squared input norms [in]."""
    return weight.detach().abs().float() * sq_norms.sqrt()[None, :]


def wanda_mask(
    weight: torch.Tensor, sq_norms: torch.Tensor, sparsity: float, structure: Structure
) -> torch.Tensor:
    """Bool mask [out, in], True = prune."""
    scores = wanda_scores(weight, sq_norms)
    if structure.is_nm:
        return lowest_n_of_m(scores, structure.n, structure.m)
    return lowest_per_row(scores, sparsity)
