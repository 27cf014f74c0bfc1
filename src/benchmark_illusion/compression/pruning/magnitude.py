"""Magnitude pruning: remove the weights of smallest |W|.

Unstructured: one threshold per weight matrix. N:M: the N smallest of every M consecutive
input weights of each row. Scores are |W| in float64 (exact for any model dtype); among equal
|W| the first position is pruned (`masks`).
"""

from __future__ import annotations

import torch

from ..blockwise import float64_device
from .masks import Structure, lowest_n_of_m, lowest_per_matrix


def magnitude_mask(weight: torch.Tensor, sparsity: float, structure: Structure) -> torch.Tensor:
    """Bool mask [out, in] on weight's device, True = prune."""
    scores = weight.detach().abs().to(float64_device(weight.device), torch.float64)
    if structure.is_nm:
        return lowest_n_of_m(scores, structure.n, structure.m).to(weight.device)
    return lowest_per_matrix(scores, sparsity).to(weight.device)
