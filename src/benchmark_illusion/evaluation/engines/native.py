"""The native engine: the project's batched engine on transformers (engine.py: prefill,
scoring from the prompt's KV cache; generation.py: greedy, beam search, sampling).

One prefill of each batch of prompts serves both the scoring of its continuations and the
start of its greedy decode; the greedy rows of consecutive batches are then decoded together
(`decode_grouped`). Beams and samples share one prefill per batch too. Batches are consecutive
runs of the requests in the caller's order (sorted by budget and prompt length): the same
prompts in the same order give the same batches, hence the same rows.
"""

from __future__ import annotations

import time

import torch

from benchmark_illusion.evaluation import engine, generation
from benchmark_illusion.evaluation.decoding import BatchItems, batches, prefill_batches
from benchmark_illusion.evaluation.engines import Answer, Engine, Recovered, Request, Sampling


def as_engine(model, tokenizer, settings, stop: generation.StopRule | None = None) -> Engine:
    """`model` itself when it is an engine; a transformers model wrapped in the native engine
    (with `stop`, else the stop rule from the tokenizer and the model's generation config)."""
    if isinstance(model, Engine):
        return model
    from benchmark_illusion.evaluation.decoding import stop_rule

    stop = stop if stop is not None else stop_rule(model, tokenizer)
    return NativeEngine(model, engine.pad_id(tokenizer), settings, stop)


class NativeEngine(Engine):
    """The native engine on a loaded transformers model.

    settings: EvalSettings (batch_size, decode_rows, batch_tokens, decode_tokens: how many rows
    run together). stop: the stop rule (decoding.stop_rule).
    """

    name = "native"

    def __init__(self, model, pad_id: int, settings, stop: generation.StopRule):
        self.model, self.pad_id, self.settings, self.stop = model, pad_id, settings, stop
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")

    def score_and_greedy(
        self, requests: list[Request], fmt: str, decode_fmt: str | None = None, on_done=None
    ) -> list[Answer]:
        ids = [r.prompt for r in requests]
        names = [r.name for r in requests]
        budget = [r.budget for r in requests]
        decode = any(budget)
        bans = [r.ban or [] for r in requests] if any(r.ban for r in requests) else None
        answers: list[Answer | None] = [None] * len(requests)

        def prefilled():
            for batch in prefill_batches(list(range(len(requests))), ids, self.settings):
                naming = BatchItems(fmt, [names[i] for i in batch])
                t0 = time.perf_counter()
                with naming:
                    state = engine.prefill(self.model, [ids[i] for i in batch], self.pad_id)
                t_prefill = (time.perf_counter() - t0) / len(batch)
                t1 = time.perf_counter()
                conts = [requests[i].conts for i in batch]
                with naming:
                    scores = engine.score_tokens(self.model, state, conts, self.pad_id)
                t_score = (time.perf_counter() - t1) / len(batch)
                for b, i in enumerate(batch):
                    answers[i] = Answer(scores[b], None, t_prefill, t_score)
                if on_done is not None:
                    on_done(len(batch))
                if decode:
                    yield batch, state, None
                del state

        if decode:
            grouped = decode_grouped(
                self.model,
                prefilled(),
                budget,
                self.stop,
                self.pad_id,
                self.settings,
                names,
                decode_fmt or fmt,
                bans=bans,
            )
            for batch, _, gen, t_gen in grouped:
                for b, i in enumerate(batch):
                    answers[i].tokens = gen[b]
                    answers[i].decode_seconds = t_gen
        else:
            for _ in prefilled():
                pass
        return answers

    def score_prefix(self, prefix: list[int], cont: list[int], fmt: str, name: str) -> float:
        with BatchItems(fmt, [name]):
            return naive_logprob(self.model, prefix, cont)

    def beams_and_samples(
        self, requests: list[Request], how: Sampling, fmt: str, on_done=None
    ) -> list[Recovered]:
        """One prefill per batch (settings.batch_size requests of one budget) serves every beam
        and every sample; samples are drawn from a generator seeded per batch
        (seed * 1_000_003 + batch number: the batches are fixed by the request order, so a
        rerun draws the same)."""
        budget = [r.budget for r in requests]
        ban = [r.ban or [] for r in requests] if any(r.ban for r in requests) else None
        decodes = [d for d, k in (("beam", how.num_beams), ("sample", how.num_samples)) if k]
        out = [Recovered() for _ in requests]
        order = list(range(len(requests)))
        for n_batch, batch in enumerate(batches(order, self.settings.batch_size, budget)):
            names = [requests[i].name for i in batch]
            t0 = time.perf_counter()
            with BatchItems(f"{fmt} {'+'.join(decodes)}", names):
                state = engine.prefill(self.model, [requests[i].prompt for i in batch], self.pad_id)
            t_prefill = (time.perf_counter() - t0) / len(decodes)
            row_budgets = [budget[i] for i in batch]
            row_bans = [ban[i] for i in batch] if ban is not None else None
            for decode in decodes:
                t1 = time.perf_counter()
                if decode == "beam":
                    with BatchItems(f"{fmt} beam", names):
                        seqs = generation.beam_search(
                            self.model,
                            state,
                            how.num_beams,
                            row_budgets,
                            self.stop.stop_ids,
                            ban=row_bans,
                        )
                else:
                    gen = torch.Generator(device=state.mask.device)
                    gen.manual_seed(how.seed * 1_000_003 + n_batch)
                    with BatchItems(f"{fmt} sample", names):
                        seqs = generation.sample(
                            self.model,
                            state,
                            how.num_samples,
                            row_budgets,
                            self.stop,
                            gen,
                            top_p=how.top_p,
                            temperature=how.temperature,
                            ban=row_bans,
                        )
                k = how.num_beams if decode == "beam" else how.num_samples
                dt = (t_prefill + time.perf_counter() - t1) / (len(batch) * k)
                for b, i in enumerate(batch):
                    if decode == "beam":
                        out[i].beams, out[i].beam_seconds = seqs[b], dt
                    else:
                        out[i].samples, out[i].sample_seconds = seqs[b], dt
            if on_done is not None:
                on_done(len(batch))
        return out


@torch.inference_mode()
def naive_logprob(model, prefix: list[int], cont: list[int]) -> float:
    """Sum log p(cont | prefix) by one full forward pass (the reference path)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prefix + cont], device=device)
    logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    engine.check_finite(logp[None], "scoring of a boundary-merged option")
    n = len(prefix)
    return float(sum(logp[n - 1 + j, t] for j, t in enumerate(cont)))


def decode_grouped(
    model,
    prefilled,
    budget: list[int],
    stop,
    pad_id: int,
    settings,
    item_ids: list[str],
    fmt: str,
    bans: list[list[int]] | None = None,
):
    """Greedy answers of prefilled batches, decoded together settings.decode_rows rows at a time.

    prefilled: (batch, state, payload) triples as the caller's prefills produce them (each
    batch's state no longer needed by the caller once yielded). A decode step reads every
    weight once whatever its rows (on 2 CPU cores a 32-row step of the bundled model costs
    1.5x an 8-row one, for 4x the rows), so the rows of consecutive batches are stacked
    (`generation.stack`) before decoding. settings.decode_tokens bounds the stacked cache: a group
    holds no more rows than fit that many tokens at its widest prompt plus the decode room (one
    batch always fits). Yields, per batch, in order: (batch, payload, generated ids per row, decode
    seconds per row). budget, item_ids, bans (token ids a row may not write; None: none): per
    request index; fmt: the format, for errors.
    """
    group: list = []

    def flush():
        t0 = time.perf_counter()
        ids = [i for batch, _, _ in group for i in batch]
        room = max(budget[i] for i in ids)
        state = generation.stack([st for _, st, _ in group], room=room)  # frees their caches
        with BatchItems(fmt, [item_ids[i] for i in ids]):
            gen = generation.greedy(
                model,
                state,
                [budget[i] for i in ids],
                stop,
                pad_id,
                ban=[bans[i] for i in ids] if bans is not None else None,
            )
        dt = (time.perf_counter() - t0) / len(ids)
        at = 0
        for batch, _, payload in group:
            yield batch, payload, gen[at : at + len(batch)], dt
            at += len(batch)

    def cells(members) -> int:
        n = sum(len(b) for b, _, _ in members)
        width = max(st.mask.shape[1] for _, st, _ in members)
        room = max(budget[i] for b, _, _ in members for i in b)
        return n * (width + room)

    for triple in prefilled:
        if group and cells([*group, triple]) > settings.decode_tokens:
            yield from flush()
            group = []
        group.append(triple)
        if sum(len(batch) for batch, _, _ in group) >= settings.decode_rows:
            yield from flush()
            group = []
    if group:
        yield from flush()
