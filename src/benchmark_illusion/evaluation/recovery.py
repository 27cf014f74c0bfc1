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

from tqdm import tqdm

from benchmark_illusion.evaluation import generation
from benchmark_illusion.evaluation.decoding import (
    Prompted,
    RowContext,
    budgets,
    forbidden,
    format_prompts,
    generated_row,
    greedy_format,
)
from benchmark_illusion.evaluation.engines import Sampling, decode_requests
from benchmark_illusion.evaluation.engines.native import as_engine
from benchmark_illusion.evaluation.settings import RecoverySettings

__all__ = ["RecoverySettings", "recovery_floor", "recovery_rows"]


def recovery_rows(
    eng,
    ctx: RowContext,
    rows: list[dict],
    *,
    stop: generation.StopRule | None = None,
    exemplars: dict[str, dict] | None = None,
    progress: bool = True,
) -> list[dict]:
    """Log rows of every enabled recovery decode on `rows` (already restricted to the scope).

    eng: an engine (engines.Engine), or a transformers model for the native engine (with
    `stop`, its stop rule; None: from the model).
    """
    toks, settings = ctx.toks, ctx.settings
    eng = as_engine(eng, toks.tok, settings, stop)
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
        how = Sampling(
            num_beams=rec.num_beams if rec.beam else 0,
            num_samples=rec.num_samples if rec.sample else 0,
            top_p=rec.top_p,
            temperature=rec.temperature,
            seed=settings.seed,
        )
        requests = decode_requests(ids, rows, order, budget, bans)
        bar = tqdm(total=len(rows), desc=ctx.label("+".join(decodes)), disable=not progress)
        found = eng.beams_and_samples(requests, how, "recovery", on_done=bar.update)
        bar.close()
        for j, i in enumerate(order):
            got = found[j]
            prompt = Prompted("open", texts[i], ids[i], budget[i])
            for decode, seqs, dt in (
                ("beam", got.beams, got.beam_seconds),
                ("sample", got.samples, got.sample_seconds),
            ):
                for k, gen_ids in enumerate(seqs):
                    out.append(generated_row(ctx, rows[i], prompt, decode, gen_ids, dt, sample=k))
    if rec.oneshot:
        out += greedy_format(
            eng,
            ctx,
            rows,
            "oneshot",
            progress=progress,
            exemplars=exemplars or {},
            max_new_tokens=floor,
        )
    return out


def recovery_floor(settings) -> int:
    """The recovery decodes' budget floor: never below the greedy decode's."""
    return max(settings.recovery.max_new_tokens, settings.max_new_tokens)
