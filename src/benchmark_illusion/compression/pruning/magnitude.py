"""Magnitude pruning: remove the weights of smallest |W|.

Unstructured: one threshold per weight matrix. N:M: the N smallest of every M consecutive
input weights of each row.
"""

from __future__ import annotations

import torch

from .masks import Structure, lowest_n_of_m, lowest_per_matrix


def magnitude_mask(weight: torch.Tensor, sparsity: float, structure: Structure) -> torch.Tensor:
    """Bool mask [out, in], True = prune."""
    scores = weight.detach().abs().float()
    if structure.is_nm:
        return lowest_n_of_m(scores, structure.n, structure.m)
    return lowest_per_matrix(scores, sparsity)
