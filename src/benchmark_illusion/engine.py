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
    """Name of the KV-cache argument: `cache` in newer transformers 5.x, `past_key_values` before."""
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


def left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ids [B, T] and mask [B, T]."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from an attention mask: 0 at each row's first real token."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


@torch.inference_mode()
def prefill(model, seqs: list[list[int]], pad_id: int) -> Prefill:
    """Run prompts `seqs` once; keep the cache for scoring and decoding."""
    device = next(model.parameters()).device
    ids, mask = left_pad(seqs, pad_id, device)
    # Only the last position's logits are needed: skipping the rest saves the lm_head's
    # [T, V] product, a fifth of the prefill's cost for a small model with a large vocabulary.
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True, **keep)
    return Prefill(
        last_logits=out.logits[:, -1, :].float(),
        cache=_out_cache(out),
        mask=mask,
        next_pos=mask.sum(-1),
    )


def token_ranks(logits: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank (1 = most likely) and log-prob of `token_ids` [B] under `logits` [B, V].

    Ties count in the token's favour: rank = 1 + number of tokens with a strictly larger logit.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    chosen = logp.gather(-1, token_ids[:, None])  # [B, 1]
    ranks = (logp > chosen).sum(-1) + 1
    return ranks, chosen[:, 0]


@torch.inference_mode()
def score_continuations(model, state: Prefill, conts: list[list[list[int]]], pad_id: int) -> list[list[float]]:
    """Sum of log-probs of each continuation given its row's prompt, reusing the prompt's cache.

    conts[b][k]: token ids of option k of row b (every row has the same K, each option >= 1 token).
    Returns [B][K] floats. The prefill state is left untouched (the cache is copied).
    """
    B, K = len(conts), len(conts[0])
    if any(len(c) != K for c in conts):
        raise ValueError("every row needs the same number of continuations")
    device = state.mask.device
    flat = [c for row in conts for c in row]  # B*K, row-major
    L = max(len(c) for c in flat)
    tok = torch.full((B * K, L), pad_id, dtype=torch.long)
    valid = torch.zeros((B * K, L), dtype=torch.bool)
    for i, c in enumerate(flat):
        tok[i, : len(c)] = torch.tensor(c)
        valid[i, : len(c)] = True
    tok, valid = tok.to(device), valid.to(device)

    first = torch.log_softmax(state.last_logits, -1).repeat_interleave(K, 0)  # [B*K, V]
    logp = torch.zeros((B * K, L), device=device)
    logp[:, 0] = first.gather(-1, tok[:, :1])[:, 0]
    if L > 1:
        cache = copy.deepcopy(state.cache)
        cache.batch_repeat_interleave(K)
        feed = tok[:, :-1]  # [B*K, L-1]; position j predicts token j+1
        feed_mask = valid[:, :-1].long()
        mask = torch.cat([state.mask.repeat_interleave(K, 0), feed_mask], dim=1)
        pos = state.next_pos.repeat_interleave(K, 0)[:, None] + torch.arange(L - 1, device=device)[None]
        out = model(input_ids=feed, attention_mask=mask, position_ids=pos, use_cache=True, **{_cache_kwarg(model): cache})
        rest = torch.log_softmax(out.logits.float(), -1).gather(-1, tok[:, 1:, None])[..., 0]
        logp[:, 1:] = rest
    logp = logp.masked_fill(~valid, 0.0)
    return logp.sum(-1).view(B, K).tolist()


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
    def for_tokenizer(cls, tokenizer, extra_stop_ids=()) -> "StopRule":
        vocab = len(tokenizer)
        texts = tokenizer.batch_decode([[i] for i in range(vocab)])
        newline = torch.tensor(["\n" in t for t in texts])
        content = torch.tensor([bool(t.strip()) for t in texts])
        stops = {i for i in extra_stop_ids if i is not None}
        if tokenizer.eos_token_id is not None:
            stops.add(tokenizer.eos_token_id)
        return cls(frozenset(stops), newline, content)


@torch.inference_mode()
def greedy(model, state: Prefill, max_new_tokens: int, stop: StopRule, pad_id: int) -> list[list[int]]:
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
        feed = torch.where(torch.tensor(done, device=device), torch.full_like(nxt, pad_id), nxt)[:, None]
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], dim=1)
        res = model(input_ids=feed, attention_mask=mask, position_ids=pos[:, None], use_cache=True, **{kw: cache})
        cache = _out_cache(res)
        logits = res.logits[:, -1, :].float()
        pos = pos + 1
    return out
