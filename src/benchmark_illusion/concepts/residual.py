"""Residual-stream activations of the dense model at an SAE's hook (SAELens hook names, sae.py).

Activations are read with a forward hook (pre-hook for `hook_resid_pre`) on the decoder block,
and the forward pass stops there. Sequences are right-padded: positions 0.. as if alone.

Extreme-norm positions. SmolLM2 (like many LLMs) writes a huge vector into the residual stream
at the first position of every sequence (an "attention sink": norm ~25,000 against a median of
~150 at layer 15); such positions carry ~99% of the residual variance of a batch and no content.
Every position whose norm exceeds `norm_threshold` (default: 10 x the median token norm of the
corpus, stored in the SAE's metadata) is left out of training, of the FVE, and of the concept
activations of items.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

from benchmark_illusion.compression.blockwise import decoder_layers
from benchmark_illusion.concepts.sae import SAEError, parse_hook
from benchmark_illusion.evaluation.engine import pad_batch


class _Stop(Exception):
    def __init__(self, hidden):
        self.hidden = hidden


class ResidualReader:
    """Residual-stream activations of a causal LM at one SAELens hook; the forward stops there."""

    def __init__(self, model: nn.Module, hook: str):
        self.layer, self.where = parse_hook(hook)
        layers = decoder_layers(model)
        if self.layer >= len(layers):
            raise SAEError(
                f"hook {hook!r}: the model has {len(layers)} decoder layers (0..{len(layers) - 1})"
            )
        self.model, self.block = model, layers[self.layer]

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[batch, seq, d_model] activations (float32) for right-padded input ids."""

        def post(_module, _args, output):
            raise _Stop(output[0] if isinstance(output, tuple) else output)

        def pre(_module, args, kwargs):
            raise _Stop(args[0] if args else kwargs["hidden_states"])

        handle = (
            self.block.register_forward_hook(post)
            if self.where == "post"
            else self.block.register_forward_pre_hook(pre, with_kwargs=True)
        )
        try:
            self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        except _Stop as s:
            return s.hidden.float()
        finally:
            handle.remove()
        raise SAEError(f"block {self.layer} was never reached in the forward pass")


def batches(seqs: list[list[int]], batch_size: int, pad_id: int, device="cpu"):
    """(index range, input_ids, attention_mask) of right-padded batches, in order."""
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start : start + batch_size]
        ids, mask = pad_batch(chunk, pad_id, device, side="right")
        yield range(start, start + len(chunk)), ids, mask


@dataclass
class Activations:
    """Kept positions of a set of sequences: acts [n, d], and where each came from."""

    acts: torch.Tensor
    seq: torch.Tensor  # [n] sequence index
    pos: torch.Tensor  # [n] position in the sequence
    n_excluded: int  # positions left out for their norm

    def select(self, seq_indices: list[int], norm_threshold: float = math.inf) -> Activations:
        """The positions of these sequences (renumbered 0.. in the given order) up to the norm
        threshold: what read_activations would return for them."""
        lookup = torch.full(
            (int(self.seq.max()) + 1 if len(self.seq) else 1,), -1, dtype=torch.long
        )
        lookup[torch.tensor(seq_indices, dtype=torch.long)] = torch.arange(len(seq_indices))
        new = lookup[self.seq]
        wanted = new >= 0
        big = self.acts.norm(dim=-1) > norm_threshold
        keep = (wanted & ~big).nonzero(as_tuple=True)[0]
        keep = keep[
            torch.argsort(new[keep] * (int(self.pos.max()) + 1) + self.pos[keep], stable=True)
        ]
        return Activations(self.acts[keep], new[keep], self.pos[keep], int((wanted & big).sum()))


def read_activations(
    reader: ResidualReader,
    seqs: list[list[int]],
    *,
    batch_size: int,
    pad_id: int,
    norm_threshold: float = math.inf,
    device="cpu",
    progress: str | None = None,
    keep: list[list[bool]] | None = None,
) -> Activations:
    """Activations of every position of `seqs` (optionally only where `keep` is true), minus
    positions whose norm exceeds norm_threshold."""
    acts, seq_idx, pos_idx, excluded = [], [], [], 0
    for rng, ids, mask in tqdm(
        list(batches(seqs, batch_size, pad_id, device)),
        desc=progress,
        disable=progress is None,
        mininterval=5,
    ):
        h = reader(ids, mask).cpu()
        sel = mask.cpu().bool()
        if keep is not None:
            for i, j in enumerate(rng):
                sel[i, : len(keep[j])] &= torch.tensor(keep[j], dtype=torch.bool)
        big = h.norm(dim=-1) > norm_threshold
        excluded += int((sel & big).sum())
        sel &= ~big
        b, p = sel.nonzero(as_tuple=True)
        acts.append(h[b, p])
        seq_idx.append(b + rng.start)
        pos_idx.append(p)
    d = reader.model.config.hidden_size
    if not acts:
        return Activations(
            torch.zeros(0, d), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0
        )
    return Activations(torch.cat(acts), torch.cat(seq_idx), torch.cat(pos_idx), excluded)


def median_norm_threshold(
    reader: ResidualReader,
    seqs: list[list[int]],
    factor: float,
    *,
    batch_size: int,
    pad_id: int,
    device="cpu",
) -> float:
    """factor x the median norm over every position of `seqs` (a reference sample)."""
    a = read_activations(reader, seqs, batch_size=batch_size, pad_id=pad_id, device=device)
    return norm_threshold(a, factor, len(seqs))


def _median(x: torch.Tensor) -> torch.Tensor:
    """The interpolated median (the mean of the two middle values for an even count), the one
    definition used everywhere; torch's .median() returns the lower of the two."""
    x = x.float().sort().values
    n = x.numel()
    return (x[(n - 1) // 2] + x[n // 2]) / 2


def norm_threshold(acts: Activations, factor: float, n_ref: int) -> float:
    """factor x the median norm of the positions of the first n_ref sequences of `acts`."""
    return float(factor * _median(acts.acts[acts.seq < n_ref].norm(dim=-1)))
