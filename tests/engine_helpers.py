"""Helpers of the engine tests only: shorthands over evaluation.engine that no pipeline code
calls (kept out of the package so that it holds only what the pipeline runs)."""

from __future__ import annotations

import torch

from benchmark_illusion.evaluation.engine import Prefill, pad_batch, score_tokens


def left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ids [B, T] and mask [B, T] (pad_batch, side='left')."""
    return pad_batch(seqs, pad_id, device, side="left")


def score_continuations(
    model, state: Prefill, conts: list[list[list[int]]], pad_id: int
) -> list[list[float]]:
    """Sum of log-probs of each continuation given its row's prompt, reusing the prompt's cache.

    conts[b][k]: token ids of option k of row b (each option >= 1 token). Returns [B][K_b] floats.
    """
    return [[s.total for s in row] for row in score_tokens(model, state, conts, pad_id)]
