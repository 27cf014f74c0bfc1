"""Recovery decodes: is an answer the greedy `open` decode misses still near the top?

  beam     `open` prompt, beam search (5 beams): rows decode='beam', sample = beam rank
           (0 = top beam)
  sample   `open` prompt, nucleus sampling (10 samples, top_p 0.9, temperature 1.0, top_k off,
           seeded): rows decode='sample', sample = 0..9
  oneshot  one worked example (same language, another passage) before the `open` prompt, greedy:
           rows format='oneshot', decode='greedy'

They run on the MC-only items (scope 'mc_only': greedy `open` wrong, `mc` right; the items whose
answer may be demoted rather than erased), on every item whose greedy `open` answer is wrong
('open_wrong'), or on every item ('all'). transformers adds top_k=50 to sampling unless told
otherwise; top_k=0 is passed so that the nucleus alone decides.

Budgets: a recovery decode may write at least as many new tokens as the greedy decode of the
same item (`evaluation.max_new_tokens`, raised to the item's longest gold + budget_margin);
`recovery.max_new_tokens` can only raise that floor. A smaller budget would label an item
erased because its gold does not fit (a Bengali gold takes 34-38 tokens of the bundled
tokenizer). Every row logs its budget in `max_new_tokens`.
"""

from __future__ import annotations

import time

import torch
from tqdm import tqdm

from . import engine
from .decoding import batches, budgets, format_prompts, greedy_format, judge_row
from .prompts import prompt_id
from .settings import RecoverySettings

__all__ = ["RecoverySettings", "recovery_floor", "recovery_rows"]


def recovery_rows(
    model,
    toks,
    rows: list[dict],
    settings,
    stop: engine.StopRule,
    base: dict,
    exemplars: dict[str, dict],
    progress: bool,
) -> list[dict]:
    """Log rows of every enabled recovery decode on `rows` (already restricted to the scope)."""
    rec: RecoverySettings = settings.recovery
    floor = recovery_floor(settings)
    out: list[dict] = []
    if not rows:
        return out
    if rec.beam or rec.sample:
        budget = budgets(toks, rows, floor, settings.budget_margin)
        texts, ids, order = format_prompts(toks, settings, rows, "open", budget=budget)
        stop_ids = sorted(stop.stop_ids)
        common = dict(pad_token_id=toks.pad_id, eos_token_id=stop_ids or None)
        passes = []
        if rec.beam:
            passes.append(
                (
                    "beam",
                    dict(
                        do_sample=False,
                        num_beams=rec.num_beams,
                        num_return_sequences=rec.num_beams,
                        early_stopping=True,
                    ),
                )
            )
        if rec.sample:
            passes.append(
                (
                    "sample",
                    dict(
                        do_sample=True,
                        top_p=rec.top_p,
                        temperature=rec.temperature,
                        top_k=0,
                        num_return_sequences=rec.num_samples,
                    ),
                )
            )
        for decode, kwargs in passes:
            bar = tqdm(
                total=len(rows),
                desc=f"{decode} {base['dataset']}/{base['lang']}",
                disable=not progress,
            )
            for n_batch, batch in enumerate(batches(order, settings.batch_size, budget)):
                if decode == "sample":
                    # Seeded per batch: batches are fixed by length sorting, so reruns draw the
                    # same.
                    torch.manual_seed(settings.seed * 1_000_003 + n_batch)
                t0 = time.perf_counter()
                seqs = _generate(
                    model,
                    [ids[i] for i in batch],
                    toks.pad_id,
                    {**common, **kwargs, "max_new_tokens": budget[batch[0]]},
                )
                k = kwargs["num_return_sequences"]
                dt = (time.perf_counter() - t0) / (len(batch) * k)
                for b, i in enumerate(batch):
                    for j in range(k):
                        gen = seqs[b * k + j]
                        text = toks.tok.decode(gen, skip_special_tokens=True)
                        out.append(
                            dict(
                                base,
                                item_id=rows[i]["item_id"],
                                format="open",
                                decode=decode,
                                sample=j,
                                prompt_id=prompt_id(texts[i]),
                                output=text,
                                **judge_row(text, rows[i], settings),
                                gold_option=rows[i]["gold_option"],
                                n_prompt_tokens=len(ids[i]),
                                n_output_tokens=len(gen),
                                max_new_tokens=budget[i],
                                seconds=dt,
                            )
                        )
                bar.update(len(batch))
            bar.close()
    if rec.oneshot:
        out += greedy_format(
            model,
            toks,
            rows,
            settings,
            stop,
            base,
            progress,
            "oneshot",
            exemplars,
            max_new_tokens=floor,
        )
    return out


def recovery_floor(settings) -> int:
    """The recovery decodes' budget floor: never below the greedy decode's."""
    return max(settings.recovery.max_new_tokens, settings.max_new_tokens)


@torch.inference_mode()
def _generate(model, seqs: list[list[int]], pad_id: int, kwargs: dict) -> list[list[int]]:
    """New tokens of model.generate on left-padded prompts, stop and pad tokens removed."""
    device = next(model.parameters()).device
    ids, mask = engine.left_pad(seqs, pad_id, device)
    out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    new = out[:, ids.shape[1] :].tolist()
    stops = kwargs.get("eos_token_id") or []
    result = []
    for row in new:
        cut = next((j for j, t in enumerate(row) if t in stops), len(row))
        result.append(row[:cut])
    return result
