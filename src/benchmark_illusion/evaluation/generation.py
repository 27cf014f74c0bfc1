"""Decoding from a prefill (engine.py): greedy, beam search and nucleus sampling, batched, with
the decoded tokens written in place into a KV cache that has room for them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicLayer

from benchmark_illusion.evaluation.engine import (
    Prefill,
    cache_kwarg,
    check_finite,
    out_cache,
    select_rows,
)


class RoomyLayer(DynamicLayer):
    """A DynamicLayer whose rows sit in a buffer with room for more tokens.

    DynamicLayer appends each decoded token with torch.cat, which copies the whole cache at
    every step; here the token is written in place and `keys`/`values` are views of the filled
    part, so attention sees exactly what DynamicLayer would give it. Past the room it grows.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int):
        super().__init__()
        self.device, self.is_initialized = keys.device, True
        self._k = keys.new_empty((*keys.shape[:2], keys.shape[2] + room, keys.shape[3]))
        self._v = values.new_empty((*values.shape[:2], values.shape[2] + room, values.shape[3]))
        self.length = keys.shape[2]
        self._k[:, :, : self.length] = keys
        self._v[:, :, : self.length] = values
        self._views()

    @classmethod
    def stacked(cls, parts: list[tuple[torch.Tensor, torch.Tensor]], width: int, room: int):
        """The rows of every (keys, values) part, each right-aligned in `width` positions;
        the padding on the left is zero (masked, but it must not hold NaN: a masked value
        still meets a zero weight)."""
        k0, v0 = parts[0]
        n = sum(k.shape[0] for k, _ in parts)
        layer = cls.__new__(cls)
        DynamicLayer.__init__(layer)
        layer.device, layer.is_initialized, layer.length = k0.device, True, width
        layer._k = k0.new_empty((n, k0.shape[1], width + room, k0.shape[3]))
        layer._v = v0.new_empty((n, v0.shape[1], width + room, v0.shape[3]))
        at = 0
        for k, v in parts:
            rows, pad = slice(at, at + k.shape[0]), width - k.shape[2]
            layer._k[rows, :, :pad] = 0
            layer._v[rows, :, :pad] = 0
            layer._k[rows, :, pad:width] = k
            layer._v[rows, :, pad:width] = v
            at += k.shape[0]
        layer._views()
        return layer

    def _views(self) -> None:
        self.keys = self._k[:, :, : self.length]
        self.values = self._v[:, :, : self.length]

    def update(self, key_states, value_states, *args, **kwargs):
        n = key_states.shape[2]
        if self.length + n > self._k.shape[2]:
            self._k = torch.cat([self._k, torch.empty_like(self._k)], dim=2)
            self._v = torch.cat([self._v, torch.empty_like(self._v)], dim=2)
        self._k[:, :, self.length : self.length + n] = key_states
        self._v[:, :, self.length : self.length + n] = value_states
        self.length += n
        self._views()
        return self.keys, self.values

    def reorder_from(self, rows: torch.Tensor, start: int) -> None:
        """Reorder rows for beam search, copying only positions from `start` on: the caller
        guarantees that the rows it swaps agree before `start` (beams of one prompt)."""
        self._k[:, :, start : self.length] = self._k[rows, :, start : self.length]
        self._v[:, :, start : self.length] = self._v[rows, :, start : self.length]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._views()

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        self.batch_select_indices(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.batch_select_indices(
            torch.arange(self._k.shape[0], device=self._k.device).repeat_interleave(repeats)
        )

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes the number of tokens to remove as a negative integer")
        self.length -= abs(tokens_to_remove)
        self._views()


def expand(state: Prefill, repeats: int, room: int = 0) -> Prefill:
    """The prefill state with each row repeated `repeats` times (row b -> rows b*r .. b*r+r-1).

    The decodes that start many continuations from one prompt (beams, samples) share its
    prefill this way instead of running the prompt once per continuation. room: tokens the
    caller will decode; with room, plain DynamicLayers become RoomyLayers (in-place appends).
    """
    rows = torch.arange(state.mask.shape[0], device=state.mask.device).repeat_interleave(repeats)
    if room and all(type(layer) is DynamicLayer for layer in state.cache.layers):
        cache = copy.copy(state.cache)
        cache.layers = [
            RoomyLayer(layer.keys[rows], layer.values[rows], room) for layer in state.cache.layers
        ]
    else:
        cache = select_rows(state.cache, rows)
    return Prefill(
        last_logits=state.last_logits[rows],
        cache=cache,
        mask=state.mask[rows],
        next_pos=state.next_pos[rows],
    )


def stack(states: list[Prefill], room: int = 0) -> Prefill:
    """One state holding the rows of every state in `states`, in order (left-padded to the
    widest), with RoomyLayers that have `room` for decoded tokens.

    Greedy decoding is bound by reading the weights once per step, not by the rows it feeds:
    decoding the rows of several prefill batches together makes each step several times
    cheaper per row. The states' caches are released layer by layer while copying, so the
    peak holds one copy of the rows plus one layer.
    """
    width = max(s.mask.shape[1] for s in states)
    caches = [s.cache for s in states]
    layers = []
    for j in range(len(caches[0].layers)):
        parts = [(c.layers[j].keys, c.layers[j].values) for c in caches]
        layers.append(RoomyLayer.stacked(parts, width, room))
        for c in caches:
            c.layers[j] = None  # the copy above holds these rows now
    cache = copy.copy(caches[0])
    cache.layers = layers
    mask = torch.cat(
        [torch.nn.functional.pad(s.mask, (width - s.mask.shape[1], 0)) for s in states]
    )
    return Prefill(
        last_logits=torch.cat([s.last_logits for s in states]),
        cache=cache,
        mask=mask,
        next_pos=torch.cat([s.next_pos for s in states]),
    )


def _reorder_beams(cache, rows: torch.Tensor, start: int) -> None:
    """Point each beam's cache row at its parent's (rows: new row -> parent row)."""
    if all(isinstance(layer, RoomyLayer) for layer in cache.layers):
        for layer in cache.layers:
            layer.reorder_from(rows, start)
    else:
        cache.reorder_cache(rows)


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

    def feed(self, tokens: list[int], has_content: bool, t: int) -> tuple[bool, bool]:
        """Apply token `t` to a row's `tokens`: appended unless it is a stop token.
        Returns (the row is done, the row has content)."""
        if t in self.stop_ids:
            return True, has_content
        tokens.append(t)
        if t < self.newline.shape[0]:
            has_content = has_content or bool(self.content[t])
            if bool(self.newline[t]) and has_content:
                return True, has_content
        return False, has_content


def ban_mask(ban, rows: int, vocab: int, device) -> torch.Tensor | None:
    """[rows, vocab] True where a row's decode may not write the token (ban: per row, a list of
    token ids; None: no ban). The positive control forbids each gold's first token this way."""
    if ban is None:
        return None
    if len(ban) != rows:
        raise ValueError(f"{len(ban)} ban lists for {rows} rows")
    mask = torch.zeros((rows, vocab), dtype=torch.bool, device=device)
    for r, ids in enumerate(ban):
        ids = [i for i in ids if 0 <= i < vocab]
        if ids:
            mask[r, torch.tensor(ids, device=device)] = True
    return mask


@torch.inference_mode()
def greedy(
    model,
    state: Prefill,
    budgets: int | list[int],
    stop: StopRule,
    pad_id: int,
    ban: list[list[int]] | None = None,
) -> list[list[int]]:
    """Greedy continuation of every row from its prefill; returns the generated ids per row,
    without the stop token.

    budgets: new tokens per row (one int: the same for every row). The state's cache is
    consumed: decoded tokens are written in place (plain layers are first moved into
    RoomyLayers, see `stack`). Finished rows are fed padding and leave the batch once a quarter
    of it is finished, so a long answer does not keep the short ones' rows running. ban: per
    row, token ids it may never write (`ban_mask`).
    """
    device = state.mask.device
    B = state.mask.shape[0]
    budget = [budgets] * B if isinstance(budgets, int) else list(budgets)
    if len(budget) != B:
        raise ValueError(f"{len(budget)} budgets for {B} rows")
    steps = max(budget, default=0)
    if not all(isinstance(layer, RoomyLayer) for layer in state.cache.layers):
        state = stack([state], room=steps)
    cache, mask, pos, logits = state.cache, state.mask, state.next_pos.clone(), state.last_logits
    out: list[list[int]] = [[] for _ in range(B)]
    live = [b_ > 0 for b_ in budget]
    has_content = [False] * B
    rows = torch.arange(B, device=device)  # the rows in the cache, in cache order
    kw = cache_kwarg(model)
    banned = ban_mask(ban, B, state.last_logits.shape[-1], device)
    for _ in range(steps):
        if banned is not None:
            logits = logits.masked_fill(banned[rows], float("-inf"))
        nxt = logits.argmax(-1)  # [rows]
        for row, t in zip(rows.tolist(), nxt.tolist(), strict=True):
            if live[row]:
                done, has_content[row] = stop.feed(out[row], has_content[row], t)
                live[row] = not done and len(out[row]) < budget[row]
        keep = [j for j, row in enumerate(rows.tolist()) if live[row]]
        if not keep:
            break
        if len(keep) <= 0.75 * len(rows):  # each removal copies the cache: not every step
            sel = torch.tensor(keep, device=device)
            rows, mask, pos, nxt = rows[sel], mask[sel], pos[sel], nxt[sel]
            cache.batch_select_indices(sel)
        running = torch.tensor([live[row] for row in rows.tolist()], device=device)
        feed = torch.where(running, nxt, torch.full_like(nxt, pad_id))
        logits, cache, mask = _step(model, cache, mask, pos, feed, kw)
        check_finite(logits, "greedy decode", rows=rows)
        pos = pos + 1
    return out


def _step(model, cache, mask, pos, tokens, kw):
    """Feed one token per row; returns (logits [N, V] float32, cache, mask)."""
    mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    res = model(
        input_ids=tokens[:, None],
        attention_mask=mask,
        position_ids=pos[:, None],
        use_cache=True,
        **{kw: cache},
    )
    return res.logits[:, -1, :].float(), out_cache(res), mask


@torch.inference_mode()
def beam_search(
    model,
    state: Prefill,
    num_beams: int,
    budgets: list[int],
    stop_ids,
    length_penalty: float = 1.0,
    ban: list[list[int]] | None = None,
) -> list[list[list[int]]]:
    """Beam search from a shared prefill: per row, `num_beams` hypotheses, best first.

    The algorithm is transformers' beam search with early_stopping=True (its default scoring:
    sum of log-probs / generated length ** length_penalty; the top 2K (or (1 + #stop ids) x K)
    continuations per step; a hypothesis finishes on a stop id or at its row's budget), so the
    outputs equal `generate(num_beams=K, num_return_sequences=K, early_stopping=True)`. What
    differs is the cost: the prompt runs once per row, not once per beam, and each row has its
    own budget. ban: per row, token ids no hypothesis may write. Returns the tokens of each
    hypothesis without its stop token.
    """
    B, K = state.mask.shape[0], num_beams
    device = state.mask.device
    stops = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    keep = max(2, 1 + len(stops)) * K
    top_k_mask = torch.arange(keep, device=device) < K
    budget = torch.tensor(budgets, device=device)
    steps = max(budgets)
    kw = cache_kwarg(model)

    st = expand(state, K, room=steps)
    cache, mask, pos, logits = st.cache, st.mask, st.next_pos.clone(), st.last_logits
    vocab, prompt_len = logits.shape[-1], st.mask.shape[1]
    running = torch.zeros((B, K, steps), dtype=torch.long, device=device)
    run_scores = torch.zeros((B, K), device=device)
    run_scores[:, 1:] = -1e9  # the K copies are identical: only the first may expand at step 0
    seqs = torch.zeros((B, K, steps), dtype=torch.long, device=device)
    lengths = torch.zeros((B, K), dtype=torch.long, device=device)
    scores = torch.full((B, K), -1e9, device=device)
    finished = torch.zeros((B, K), dtype=torch.bool, device=device)
    improvable = torch.ones((B, 1), dtype=torch.bool, device=device)
    banned = ban_mask(ban, B, vocab, device)
    for t in range(steps):
        if banned is not None:
            logits = logits.view(B, K, vocab).masked_fill(banned[:, None, :], float("-inf"))
            logits = logits.view(B * K, vocab)
        acc = torch.log_softmax(logits, -1).view(B, K, vocab) + run_scores[:, :, None]
        top_lp, top_idx = torch.topk(acc.view(B, K * vocab), k=keep)
        src, tok = top_idx // vocab, top_idx % vocab
        cand = torch.take_along_dim(running, src[:, :, None], dim=1)
        cand[:, :, t] = tok
        hits = torch.isin(tok, stops) | (t + 1 >= budget)[:, None]
        # the K best unfinished continuations run on
        run_lp = top_lp + hits.float() * -1e9
        nxt = torch.topk(run_lp, k=K).indices
        running = torch.take_along_dim(cand, nxt[:, :, None], dim=1)
        run_scores = torch.take_along_dim(run_lp, nxt, dim=1)
        parent = torch.take_along_dim(src, nxt, dim=1)
        # finished hypotheses among the top K enter the list of the K best finished
        fin_lp = top_lp / ((t + 1) ** length_penalty)
        fin_lp = fin_lp + finished.all(-1, keepdim=True).float() * -1e9
        fin_lp = fin_lp + (~improvable).float() * -1e9
        fin_lp = fin_lp + (~(hits & top_k_mask[None, :])).float() * -1e9
        fin_len = torch.where(torch.isin(tok, stops), t, t + 1)
        merged = torch.cat([scores, fin_lp], dim=1)
        best = torch.topk(merged, k=K).indices
        seqs = torch.take_along_dim(torch.cat([seqs, cand], dim=1), best[:, :, None], dim=1)
        lengths = torch.take_along_dim(torch.cat([lengths, fin_len], dim=1), best, dim=1)
        finished = torch.take_along_dim(
            torch.cat([finished, hits & top_k_mask[None, :]], dim=1), best, dim=1
        )
        scores = torch.take_along_dim(merged, best, dim=1)
        # can a running beam still beat the worst finished one? (transformers' heuristic)
        best_running = run_scores[:, :1] / ((t + 1) ** length_penalty)
        worst = torch.where(finished, scores.min(1, keepdim=True).values, -1e9)
        improvable = improvable & (best_running > worst).any(-1, keepdim=True)
        done = ~improvable[:, 0] | finished.all(-1) | hits.all(-1)
        if bool(done.all()) or t == steps - 1:
            break
        rows = (parent + torch.arange(B, device=device)[:, None] * K).view(-1)
        _reorder_beams(cache, rows, prompt_len)
        logits, cache, mask = _step(model, cache, mask, pos, running[:, :, t].reshape(-1), kw)
        check_finite(logits, "beam search", group=K)
        pos = pos + 1
    return [[seqs[b, k, : int(lengths[b, k])].tolist() for k in range(K)] for b in range(B)]


@torch.inference_mode()
def sample(
    model,
    state: Prefill,
    n: int,
    budgets: list[int],
    stop: StopRule,
    generator: torch.Generator,
    top_p: float = 1.0,
    temperature: float = 1.0,
    ban: list[list[int]] | None = None,
) -> list[list[list[int]]]:
    """`n` nucleus samples per row from a shared prefill (no top-k).

    Per step: logits / temperature, then transformers' top-p filter (the smallest set of most
    likely tokens whose probability reaches top_p), then one multinomial draw per row from
    `generator` over all B x n rows at once, as `generate(do_sample=True,
    num_return_sequences=n)` draws from the global generator: with the same seed and the same
    rows, the draws are the same. A sample ends on a stop token, at its row's budget, or on a
    line break after some content (judging reads the first non-empty line). Finished rows
    stop being computed, but a draw is still made for them so later draws do not move.
    ban: per row, token ids no sample of it may write. Returns the tokens of each sample
    without the stop token.
    """
    B = state.mask.shape[0]
    device = state.mask.device
    st = expand(state, n, room=max(budgets))
    N = B * n
    cache, mask, pos, logits = st.cache, st.mask, st.next_pos.clone(), st.last_logits
    budget = torch.tensor(budgets, device=device).repeat_interleave(n)
    out: list[list[int]] = [[] for _ in range(N)]
    live = [True] * N
    rows = torch.arange(N, device=device)  # the rows in the cache, in cache order
    has_content = [False] * N
    kw = cache_kwarg(model)
    banned = ban_mask(ban, B, logits.shape[-1], device)
    if banned is not None:
        banned = banned.repeat_interleave(n, 0)
    for _ in range(max(budgets)):
        if banned is not None:
            logits = logits.masked_fill(banned[rows], float("-inf"))
        scores = logits / temperature if temperature != 1.0 else logits
        if top_p < 1.0:
            sorted_logits, order = torch.sort(scores, descending=False)
            drop = sorted_logits.softmax(-1).cumsum(-1) <= (1 - top_p)
            drop[..., -1:] = False
            scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
        probs = torch.zeros((N, scores.shape[-1]), device=device)
        probs[:, 0] = 1.0  # rows no longer computed: a draw that is thrown away
        probs[rows] = scores.softmax(-1)
        nxt = torch.multinomial(probs, 1, generator=generator)[:, 0]
        for row in rows.tolist():
            if not live[row]:
                continue
            done, has_content[row] = stop.feed(out[row], has_content[row], int(nxt[row]))
            if done or len(out[row]) >= int(budget[row]):
                live[row] = False
        keep = [j for j, row in enumerate(rows.tolist()) if live[row]]
        if not keep:
            break
        # Finished rows leave the cache once a quarter of it is finished (each removal copies
        # the cache); until then they are computed and their draws thrown away.
        if len(keep) <= 0.75 * len(rows):
            sel = torch.tensor(keep, device=device)
            rows, mask, pos = rows[sel], mask[sel], pos[sel]
            cache.batch_select_indices(sel)
        logits, cache, mask = _step(model, cache, mask, pos, nxt[rows], kw)
        check_finite(logits, "sampling", rows=rows, group=n)
        pos = pos + 1
    return [out[b * n : (b + 1) * n] for b in range(B)]
