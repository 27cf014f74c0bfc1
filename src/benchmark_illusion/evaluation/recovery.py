"""Recovery decodes: is an answer the greedy `open` decode misses still near the top?

  beam     `open` prompt, beam search (5 beams): rows decode='beam', sample = beam rank
           (0 = top beam)
  sample   `open` prompt, nucleus sampling (10 samples, top_p 0.9, temperature 1.0, top_k off,
           seeded): rows decode='sample', sample = 0..9
  oneshot  one worked example (same language, another passage) before the `open` prompt, greedy:
           rows format='oneshot', decode='greedy'

They run on the MC-only items (scope 'mc_only': greedy `open` wrong, `mc` right; the items whose
answer may be demoted rather than erased), on every item whose greedy `open` answer is wrong
('open_wrong'), or on every item ('all').

Beams and samples follow transformers' algorithms (generation.beam_search, generation.sample:
the same outputs as `generate` with the same seed, tested side by side) but share one prefill of
each batch's prompts, where `generate` runs the prompt once per beam and once per sample. Sampling
has no top-k (transformers would add top_k=50 unless told otherwise), and a sample ends at a
line break after content, as the greedy decode does: the judge reads the first line.

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

from benchmark_illusion.evaluation import engine, generation
from benchmark_illusion.evaluation.decoding import (
    BatchItems,
    batches,
    budgets,
    forbidden,
    format_prompts,
    generated_row,
    greedy_format,
)
from benchmark_illusion.evaluation.settings import RecoverySettings

__all__ = ["RecoverySettings", "recovery_floor", "recovery_rows"]


def recovery_rows(
    model,
    toks,
    rows: list[dict],
    settings,
    stop: generation.StopRule,
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
        bans = forbidden(toks, rows, settings)
        decodes = [d for d, on in (("beam", rec.beam), ("sample", rec.sample)) if on]
        bar = tqdm(
            total=len(rows),
            desc=f"{'+'.join(decodes)} {base['dataset']}/{base['lang']}",
            disable=not progress,
        )
        for n_batch, batch in enumerate(batches(order, settings.batch_size, budget)):
            # One prefill of the batch's prompts serves every beam and every sample.
            names = [rows[i]["item_id"] for i in batch]
            t0 = time.perf_counter()
            with BatchItems(f"recovery {'+'.join(decodes)}", names):
                state = engine.prefill(model, [ids[i] for i in batch], toks.pad_id)
            t_prefill = (time.perf_counter() - t0) / len(decodes)
            row_budgets = [budget[i] for i in batch]
            for decode in decodes:
                t1 = time.perf_counter()
                if decode == "beam":
                    with BatchItems("recovery beam", names):
                        seqs = generation.beam_search(
                            model,
                            state,
                            rec.num_beams,
                            row_budgets,
                            stop.stop_ids,
                            ban=[bans[i] for i in batch] if bans is not None else None,
                        )
                else:
                    # Seeded per batch: batches are fixed by length sorting, so reruns draw
                    # the same.
                    gen = torch.Generator(device=state.mask.device)
                    gen.manual_seed(settings.seed * 1_000_003 + n_batch)
                    with BatchItems("recovery sample", names):
                        seqs = generation.sample(
                            model,
                            state,
                            rec.num_samples,
                            row_budgets,
                            stop,
                            gen,
                            top_p=rec.top_p,
                            temperature=rec.temperature,
                            ban=[bans[i] for i in batch] if bans is not None else None,
                        )
                k = rec.num_beams if decode == "beam" else rec.num_samples
                dt = (t_prefill + time.perf_counter() - t1) / (len(batch) * k)
                for b, i in enumerate(batch):
                    for j, gen_ids in enumerate(seqs[b]):
                        out.append(
                            generated_row(
                                toks,
                                settings,
                                base,
                                rows[i],
                                "open",
                                decode,
                                texts[i],
                                ids[i],
                                gen_ids,
                                budget[i],
                                dt,
                                sample=j,
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
