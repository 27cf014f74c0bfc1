"""Batched forward-pass primitives: prefill, gold rank, option scoring, padding.

One prefill of the `open` prompt serves three measurements: its last-position logits give the
first greedy token and the gold first-token rank, and its KV cache is reused both to score
the MC options and to continue the greedy generation. Sequences are left-padded; position
ids are passed explicitly (cumulative sum of the attention mask) so that a padded row sees
exactly the positions it would see alone.

Every logit a decision is read from (the prefill's last position, each decode step, each scored
distribution) is checked finite, one reduction per batch tensor: a NaN or inf raises
NonFiniteError instead of becoming an answer.

Shapes: B = batch, T = padded prompt length, K = options per item, L = option length, V = vocab.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import torch


def cache_kwarg(model) -> str:
    """Name of the KV-cache argument: `cache` in newer transformers 5.x, `past_key_values`
    before."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def out_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


class NonFiniteError(ValueError):
    """A logit or log-probability that is NaN or infinite: every decision read from it would be
    wrong (the argmax of NaN option scores is option A, a NaN gold ranks first, a decode of NaN
    logits writes nothing), so evaluation stops instead of logging it.

    step: where it appeared (prefill, scoring, greedy decode, beam search, sampling).
    rows: the rows of the step's batch holding one (None: not known).
    The callers add what they know (`locate`): fmt, the format or decode being run; items, the
    batch's item ids in row order; checkpoint, the model's identity; dtype, its weights' dtype.
    """

    def __init__(self, step: str, rows: list[int] | None = None):
        super().__init__(step)
        self.step, self.rows = step, rows
        self.fmt: str | None = None
        self.items: list[str] | None = None
        self.checkpoint: str | None = None
        self.dtype: str | None = None

    def locate(self, fmt: str, items: list[str]) -> None:
        """Name the format and the batch's item ids (row order); the innermost caller wins."""
        if self.items is None:
            self.fmt, self.items = fmt, list(items)

    def __str__(self) -> str:
        where = self.step + (f" ({self.fmt})" if self.fmt else "")
        msg = f"non-finite value (NaN or inf) in the {where}"
        if self.checkpoint:
            msg += f" of checkpoint {self.checkpoint}"
        if self.items is not None:
            bad = self.items if self.rows is None else [self.items[r] for r in self.rows]
            msg += f"; items {_id_list(bad)}"
            if len(bad) < len(self.items):
                msg += f" (of the batch {_id_list(self.items)})"
        elif self.rows is not None:
            msg += f"; batch rows {self.rows}"
        msg += ". No log row is written." if self.checkpoint else "."
        if self.dtype in ("float16", "bfloat16"):
            msg += f" {self.dtype} can overflow where float32 does not: evaluate in float32;"
            return msg + " check the checkpoint's weights for NaN or inf."
        return msg + " Check the checkpoint's weights for NaN or inf."


def _id_list(ids: list[str], at_most: int = 20) -> str:
    more = f", ... ({len(ids)} in all)" if len(ids) > at_most else ""
    return ", ".join(map(str, ids[:at_most])) + more


def check_finite(
    x: torch.Tensor, step: str, rows: torch.Tensor | None = None, group: int = 1
) -> None:
    """Raise NonFiniteError unless every value of `x` ([N, ...], a row per sequence) is finite.

    The test is a sum (a NaN or inf survives any sum; on one CPU thread it costs a twentieth of
    isfinite(x).all(), which writes a mask the size of x); only when the sum is not finite is x
    read again value by value, so a sum that merely overflows raises nothing. rows: the batch
    row of each of x's rows (default: the same); group: x's rows per batch row (beams or samples
    of one prompt).
    """
    if bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all()):
        return
    bad = (~torch.isfinite(x)).reshape(len(x), -1).any(-1).nonzero()[:, 0]
    if rows is not None:
        bad = rows[bad]
    raise NonFiniteError(step, sorted({int(r) // group for r in bad.tolist()}))


@dataclass
class Prefill:
    """State after running a batch of prompts once.

    last_logits: [B, V] float32 logits at each row's last prompt token.
    cache: the model's KV cache over the padded prompts.
    mask: [B, T] attention mask (0 on padding: on the left, or between a shared head and a
      row's own tail, see `prefill`).
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


# A shared head shorter than this is run with the rest: its own forward would cost more than
# the rows' repeats of it.
SHARED_HEAD_MIN = 16


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from an attention mask: 0 at each row's first real token."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def shared_head(seqs: list[list[int]], at_least: int = SHARED_HEAD_MIN) -> int:
    """Length of the token prefix every row of `seqs` starts with, leaving each row at least
    one token of its own (0 when under `at_least` tokens, or for a single row)."""
    if len(seqs) < 2:
        return 0
    n = min(len(s) for s in seqs) - 1
    first = seqs[0]
    for s in seqs[1:]:
        k = 0
        while k < n and s[k] == first[k]:
            k += 1
        n = k
    return n if n >= at_least else 0


def _logits_to_keep(model) -> dict:
    # Only the last position's logits are needed: skipping the rest saves the lm_head's
    # [T, V] product, a fifth of the prefill's cost for a small model with a large vocabulary.
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        return {"logits_to_keep": 1}
    return {}


@torch.inference_mode()
def prefill(model, seqs: list[list[int]], pad_id: int, share: bool = True) -> Prefill:
    """Run prompts `seqs` once; keep the cache for scoring and decoding.

    share: the tokens every prompt of the batch starts with (the chat template's system turn
    and the instruction; the passage too when the batch's questions share one) run once, in
    a batch of one, and their cache is repeated to every row; only each row's own tail runs
    batched. The rows then read [head][padding][tail]: the mask is 0 on the padding, and
    positions continue from the head, so every row sees what it would see alone.
    """
    device = next(model.parameters()).device
    keep = _logits_to_keep(model)
    head = shared_head(seqs) if share else 0
    if not head:
        ids, mask = pad_batch(seqs, pad_id, device, side="left")
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True, **keep
        )
    else:
        kw = cache_kwarg(model)
        first = model(input_ids=torch.tensor([seqs[0][:head]], device=device), use_cache=True)
        cache = select_rows(out_cache(first), torch.zeros(len(seqs), dtype=torch.long))
        ids, tail = pad_batch([s[head:] for s in seqs], pad_id, device, side="left")
        mask = torch.cat([torch.ones((len(seqs), head), dtype=tail.dtype, device=device), tail], 1)
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions(mask)[:, head:],
            use_cache=True,
            **{kw: cache},
            **keep,
        )
    last_logits = out.logits[:, -1, :].float()
    check_finite(last_logits, "prefill")
    return Prefill(
        last_logits=last_logits,
        cache=out_cache(out),
        mask=mask,
        next_pos=mask.sum(-1),
    )


def select_rows(cache, rows: torch.Tensor | None = None):
    """A new cache holding rows `rows` of `cache` (repeats allowed; None: every row, shared
    until the new cache is extended); `cache` is left untouched.

    Only the selected rows are copied (a deep copy of the whole cache first would copy every
    row once more).
    """
    new = copy.copy(cache)
    new.layers = [copy.copy(layer) for layer in cache.layers]
    if rows is not None:
        new.batch_select_indices(rows)
    return new


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

    conts[b]: the continuations of row b (any number, each >= 1 token). Token j of a
    continuation is scored at the position after the prompt and tokens 0..j-1 (teacher
    forcing). Token 0 is scored by the prefill's last logits; the rest in one forward pass per
    batch in which each row holds all its continuations side by side (their tokens but the
    last), each continuation attending to the prompt and to its own earlier tokens only (a
    4D mask, positions from the prompt's end). The prompt's cache is read, never copied per
    continuation, and the prefill state is left as it was. Returns [B][K_b]
    ContinuationScores.
    """
    device = state.mask.device
    B, T = state.mask.shape
    if not any(conts):
        return [[] for _ in conts]
    if any(len(c) == 0 for row in conts for c in row):
        raise ValueError("every continuation needs at least one token")
    # where each continuation's fed tokens sit in its row's packed sequence
    starts = [[0] * len(row) for row in conts]
    width = 0
    for b, row in enumerate(conts):
        at = 0
        for k, c in enumerate(row):
            starts[b][k] = at
            at += len(c) - 1
        width = max(width, at)
    last = torch.log_softmax(state.last_logits.float(), -1)  # [B, V]: predicts token 0
    logits = None
    if width:
        feed = torch.full((B, width), pad_id, dtype=torch.long)
        pos = torch.zeros((B, width), dtype=torch.long)
        seg = torch.full((B, width), -1, dtype=torch.long)  # continuation index, -1 on padding
        off = torch.zeros((B, width), dtype=torch.long)
        for b, row in enumerate(conts):
            for k, c in enumerate(row):
                n, at = len(c) - 1, starts[b][k]
                if n:
                    feed[b, at : at + n] = torch.tensor(c[:-1])
                    off[b, at : at + n] = torch.arange(n)
                    seg[b, at : at + n] = k
        feed, seg, off = feed.to(device), seg.to(device), off.to(device)
        pos = state.next_pos[:, None] + off
        same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
        causal = off[:, None, :] <= off[:, :, None]
        own = same & causal  # [B, W, W]: earlier tokens of the same continuation
        own |= torch.eye(width, dtype=torch.bool, device=device)[None]  # padding sees itself
        prompt = state.mask.bool()[:, None, :].expand(B, width, T)
        allowed = torch.cat([prompt, own], dim=-1)[:, None]  # [B, 1, W, T + W]
        bias = torch.zeros(allowed.shape, dtype=next(model.parameters()).dtype, device=device)
        bias.masked_fill_(~allowed, torch.finfo(bias.dtype).min)
        out = model(
            input_ids=feed,
            attention_mask=bias,
            position_ids=pos,
            use_cache=True,
            **{cache_kwarg(model): select_rows(state.cache)},
        )
        logits = out.logits  # [B, W, V]
    # every scored token: its distribution (row b's last logits, or packed position p) and id
    rows_, where, toks = [], [], []
    for b, row in enumerate(conts):
        for k, c in enumerate(row):
            for j, t in enumerate(c):
                rows_.append(b)
                where.append(-1 if j == 0 else starts[b][k] + j - 1)
                toks.append(t)
    rows_t, where_t = torch.tensor(rows_, device=device), torch.tensor(where, device=device)
    toks_t = torch.tensor(toks, device=device)
    chosen_t = torch.empty(len(toks), device=device)
    ranks_t = torch.empty(len(toks), dtype=torch.long, device=device)

    # per row, the sum of every scored distribution: finite unless one value is not (or the
    # logits spread beyond 1e33); one check for the batch, see check_finite
    sums = last.sum(-1)

    def score(sel: torch.Tensor, dist: torch.Tensor) -> None:
        c = dist.gather(-1, toks_t[sel][:, None])
        chosen_t[sel] = c[:, 0]
        ranks_t[sel] = (dist > c).sum(-1) + 1  # ties count in the token's favour

    first = where_t < 0
    score(first, last[rows_t[first]])
    # row by row: the log-softmax of the scored positions only, never a second [B, W, V] copy
    for b in range(B) if logits is not None else ():
        sel = ~first & (rows_t == b)
        if bool(sel.any()):
            dist = torch.log_softmax(logits[b, where_t[sel]].float(), -1)
            sums[b] += dist.sum()
            score(sel, dist)
    check_finite(sums, "scoring of options and golds")
    ranks, chosen = ranks_t.tolist(), chosen_t.tolist()
    result: list[list[ContinuationScores]] = [[] for _ in conts]
    i = 0
    for b, row in enumerate(conts):
        for c in row:
            result[b].append(ContinuationScores(chosen[i : i + len(c)], ranks[i : i + len(c)]))
            i += len(c)
    return result
