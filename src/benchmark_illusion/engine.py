"""Batched forward-pass primitives: prefill, gold rank, option scoring, greedy decoding.

One prefill of the `open` prompt serves three measurements: its last-position logits give the
first greedy token and the gold first-token rank, and its KV cache is reused both to score
the MC options and to continue the greedy generation. Sequences are left-padded; position
ids are passed explicitly (cumulative sum of the attention mask) so that a padded row sees
exactly the positions it would see alone.

Shapes: B = batch, T = padded prompt length, K = options per item, L = option length, V = vocab.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import torch


def _cache_kwarg(model) -> str:
    """Name of the KV-cache argument: `cache` in newer transformers 5.x, `past_key_values`
    before."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _out_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@dataclass
class Prefill:
    """State after running a batch of prompts once.

    last_logits: [B, V] float32 logits at each row's last prompt token.
    cache: the model's KV cache over the padded prompts.
    mask: [B, T] attention mask (0 on left padding).
    next_pos: [B] position id of each row's next token.
    """

    last_logits: torch.Tensor
    cache: object
    mask: torch.Tensor
    next_pos: torch.Tensor


def pad_id(tokenizer) -> int:
    """The id that fills padding: the tokenizer's pad token, else its end-of-sequence token, else 0.

    Padded positions are masked out, so the id only has to be a valid one.
    """
    if tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    if tokenizer.eos_token_id is not None:
        return tokenizer.eos_token_id
    return 0


PAD_SIDES = ("left", "right")


def pad_batch(
    seqs: list[list[int]], pad_id: int, device, side: str = "left"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token lists into ids [B, T] and attention mask [B, T] (T: the longest list).

    side='left': each row's tokens end at T (prompts that are continued, see the module
    docstring); side='right': they start at 0 (a single forward, positions 0.. as alone).
    """
    if side not in PAD_SIDES:
        raise ValueError(f"side must be one of {PAD_SIDES}, not {side!r}")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            cols = slice(width - len(s), width) if side == "left" else slice(0, len(s))
            ids[i, cols] = torch.tensor(s, dtype=torch.long)
            mask[i, cols] = 1
    return ids.to(device), mask.to(device)


def left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ids [B, T] and mask [B, T] (pad_batch, side='left')."""
    return pad_batch(seqs, pad_id, device, side="left")


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from an attention mask: 0 at each row's first real token."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


@torch.inference_mode()
def prefill(model, seqs: list[list[int]], pad_id: int) -> Prefill:
    """Run prompts `seqs` once; keep the cache for scoring and decoding."""
    device = next(model.parameters()).device
    ids, mask = pad_batch(seqs, pad_id, device, side="left")
    # Only the last position's logits are needed: skipping the rest saves the lm_head's
    # [T, V] product, a fifth of the prefill's cost for a small model with a large vocabulary.
    keep = (
        {"logits_to_keep": 1}
        if "logits_to_keep" in inspect.signature(model.forward).parameters
        else {}
    )
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True, **keep
    )
    return Prefill(
        last_logits=out.logits[:, -1, :].float(),
        cache=_out_cache(out),
        mask=mask,
        next_pos=mask.sum(-1),
    )


@dataclass
class ContinuationScores:
    """Teacher-forced scores of one continuation: per-token log-probs and ranks (1 = top)."""

    logprobs: list[float]
    ranks: list[int]

    @property
    def total(self) -> float:
        return float(sum(self.logprobs))


@torch.inference_mode()
def score_tokens(
    model, state: Prefill, conts: list[list[list[int]]], pad_id: int
) -> list[list[ContinuationScores]]:
    """Per-token log-probs and ranks of each continuation given its row's prompt.

    conts[b]: the continuations of row b (any number, each >= 1 token), scored with the
    prompt's cache (copied: the prefill state is left untouched). Token j of a continuation is
    scored at the position after the prompt and tokens 0..j-1 (teacher forcing).
    Returns [B][K_b] ContinuationScores.
    """
    device = state.mask.device
    row_of = [b for b, row in enumerate(conts) for _ in row]
    flat = [c for row in conts for c in row]  # N continuations, row-major
    if not flat:
        return [[] for _ in conts]
    if any(len(c) == 0 for c in flat):
        raise ValueError("every continuation needs at least one token")
    N, L = len(flat), max(len(c) for c in flat)
    rows = torch.tensor(row_of, device=device)
    tok = torch.full((N, L), pad_id, dtype=torch.long)
    valid = torch.zeros((N, L), dtype=torch.bool)
    for i, c in enumerate(flat):
        tok[i, : len(c)] = torch.tensor(c)
        valid[i, : len(c)] = True
    tok, valid = tok.to(device), valid.to(device)

    logits = state.last_logits[rows][:, None, :]  # [N, 1, V]: predicts token 0
    if L > 1:
        cache = copy.deepcopy(state.cache)
        cache.batch_select_indices(rows)
        feed = tok[:, :-1]  # [N, L-1]; position j predicts token j+1
        mask = torch.cat([state.mask[rows], valid[:, :-1].long()], dim=1)
        pos = state.next_pos[rows][:, None] + torch.arange(L - 1, device=device)[None]
        out = model(
            input_ids=feed,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            **{_cache_kwarg(model): cache},
        )
        logits = torch.cat([logits, out.logits.float()], dim=1)  # [N, L, V]
    logp = torch.log_softmax(logits.float(), -1)
    chosen = logp.gather(-1, tok[..., None])  # [N, L, 1]
    ranks = (logp > chosen).sum(-1) + 1  # ties count in the token's favour
    chosen = chosen[..., 0]
    result: list[list[ContinuationScores]] = [[] for _ in conts]
    for i, (b, c) in enumerate(zip(row_of, flat, strict=True)):
        n = len(c)
        result[b].append(ContinuationScores(chosen[i, :n].tolist(), ranks[i, :n].tolist()))
    return result


def score_continuations(
    model, state: Prefill, conts: list[list[list[int]]], pad_id: int
) -> list[list[float]]:
    """Sum of log-probs of each continuation given its row's prompt, reusing the prompt's cache.

    conts[b][k]: token ids of option k of row b (each option >= 1 token). Returns [B][K_b] floats.
    """
    return [[s.total for s in row] for row in score_tokens(model, state, conts, pad_id)]


@dataclass(frozen=True)
class StopRule:
    """When greedy decoding ends for a row.

    stop_ids: end-of-sequence / end-of-turn tokens.
    newline: bool [V], the token's text contains a line break.
    content: bool [V], the token's text has a non-space character.
    A row ends on a stop token, or on a line break once it has produced some content
    (judging reads the first non-empty line, so later lines are never needed).
    """

    stop_ids: frozenset
    newline: torch.Tensor
    content: torch.Tensor

    @classmethod
    def for_tokenizer(cls, tokenizer, extra_stop_ids=()) -> StopRule:
        vocab = len(tokenizer)
        texts = tokenizer.batch_decode([[i] for i in range(vocab)])
        newline = torch.tensor(["\n" in t for t in texts])
        content = torch.tensor([bool(t.strip()) for t in texts])
        stops = {i for i in extra_stop_ids if i is not None}
        if tokenizer.eos_token_id is not None:
            stops.add(tokenizer.eos_token_id)
        return cls(frozenset(stops), newline, content)


@torch.inference_mode()
def greedy(
    model, state: Prefill, max_new_tokens: int, stop: StopRule, pad_id: int
) -> list[list[int]]:
    """Greedy continuation of every row, reusing the prefill cache (which it extends).

    Returns the generated ids per row, without the stop token.
    """
    device = state.mask.device
    B = state.mask.shape[0]
    cache, mask, pos = state.cache, state.mask, state.next_pos.clone()
    logits = state.last_logits
    out: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    has_content = [False] * B
    stop_ids = stop.stop_ids
    vocab = stop.newline.shape[0]
    kw = _cache_kwarg(model)
    for step in range(max_new_tokens):
        nxt = logits.argmax(-1)  # [B]
        for b, t in enumerate(nxt.tolist()):
            if done[b]:
                continue
            if t in stop_ids:
                done[b] = True
                continue
            out[b].append(t)
            if t < vocab:
                has_content[b] = has_content[b] or bool(stop.content[t])
                if bool(stop.newline[t]) and has_content[b]:
                    done[b] = True
        if all(done) or step == max_new_tokens - 1:
            break
        feed = torch.where(torch.tensor(done, device=device), torch.full_like(nxt, pad_id), nxt)[
            :, None
        ]
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], dim=1)
        res = model(
            input_ids=feed,
            attention_mask=mask,
            position_ids=pos[:, None],
            use_cache=True,
            **{kw: cache},
        )
        cache = _out_cache(res)
        logits = res.logits[:, -1, :].float()
        pos = pos + 1
    return out
