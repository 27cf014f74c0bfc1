"""Evaluate a checkpoint on an item file in the `open`, `candidates`, `mc` and `mc_nopassage`
formats.

Output: one row per item x format x sample, in the schema LOG_SCHEMA (documented in
docs/logs.md). The `open` prompt is run once per item: its prefill yields the gold first-token
rank, the MC option scores (through its KV cache) and the start of the greedy answer.
`mc_nopassage` scores the same options on the same prompt without the passage (the guessing
control), with its own short prefill.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import polars as pl
import torch
from tqdm import tqdm

from benchmark_illusion.evaluation import engine
from benchmark_illusion.evaluation.decoding import (
    Prompted,
    RowContext,
    Tokens,
    budgets,
    forbidden,
    format_prompts,
    generated_row,
    greedy_format,
)
from benchmark_illusion.evaluation.engines import Request
from benchmark_illusion.evaluation.engines.native import as_engine, naive_logprob
from benchmark_illusion.evaluation.prompts import prompt_id
from benchmark_illusion.evaluation.recovery import recovery_rows
from benchmark_illusion.evaluation.schema import LOG_SCHEMA
from benchmark_illusion.evaluation.settings import FORMATS, EvalSettings
from benchmark_illusion.textnorm import normalize

__all__ = ["LOG_SCHEMA", "EvalSettings", "RunMeta", "evaluate_items", "naive_logprob"]


@dataclass(frozen=True)
class RunMeta:
    """Identity columns written on every row."""

    model: str
    method: str = "dense"
    structure: str = "none"
    sparsity: float = 0.0
    bits: int | None = None  # bits per weight of a quantized checkpoint; None: not quantized
    dataset: str = ""
    lang: str = ""
    model_hash: str = ""
    config_hash: str = ""

    def checkpoint(self) -> str:
        """The checkpoint's identity, for messages."""
        bits = "" if self.bits is None else f" bits={self.bits}"
        return (
            f"model={self.model} method={self.method} structure={self.structure} "
            f"sparsity={self.sparsity:g}{bits} (dataset {self.dataset or '-'}, "
            f"lang {self.lang or '-'})"
        )


def evaluate_items(
    model,
    tokenizer,
    items: pl.DataFrame,
    settings: EvalSettings,
    meta: RunMeta,
    progress: bool = True,
    exemplars: dict[str, dict] | None = None,
) -> pl.DataFrame:
    """Run every requested format, then the enabled recovery decodes; return the log rows
    (LOG_SCHEMA).

    model: an engine (engines.Engine: native or vllm), or a transformers model, which the
      native engine runs.
    exemplars: item_id -> item for the 1-shot examples (needed when recovery.oneshot is on).
    Raises engine.NonFiniteError, naming the checkpoint, the step and the items, on a NaN or
    infinite logit or log-probability: no row is returned.
    """
    unknown = set(settings.formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown formats {sorted(unknown)}; known: {FORMATS}")
    torch.manual_seed(settings.seed)
    toks = Tokens(tokenizer, settings.prompt)
    eng = as_engine(model, tokenizer, settings)
    rows = items.to_dicts()
    base = dict(
        model=meta.model,
        method=meta.method,
        structure=meta.structure,
        sparsity=float(meta.sparsity),
        bits=meta.bits,
        dataset=meta.dataset,
        lang=meta.lang,
        seed=settings.seed,
        model_hash=meta.model_hash,
        config_hash=meta.config_hash,
        sample=0,
    )
    try:
        out = _rows(eng, RowContext(toks, settings, base), rows, exemplars, progress)
    except engine.NonFiniteError as err:
        err.dtype = eng.dtype
        err.checkpoint = f"{meta.checkpoint()} in {err.dtype}"
        raise
    df = pl.DataFrame(out, schema=LOG_SCHEMA)
    return df.sort(["item_id", "format", "decode", "sample"])


def _rows(eng, ctx: RowContext, rows, exemplars, progress) -> list[dict]:
    """The log rows of every requested format and recovery decode, unsorted."""
    out: list[dict] = []
    settings = ctx.settings
    want = set(settings.formats)
    if want & {"open", "mc"}:
        out += _open_and_mc(eng, ctx, rows, want, progress)
    if "mc_nopassage" in want:
        out += _mc_nopassage(eng, ctx, rows, progress)
    if "candidates" in want:
        out += greedy_format(eng, ctx, rows, "candidates", progress=progress)
    if settings.recovery.any:
        targets = rows
        scope = settings.recovery.scope
        if scope != "all":
            need = {"open"} | ({"mc"} if scope == "mc_only" else set())
            if not need <= want:
                raise ValueError(f"recovery scope {scope!r} needs the formats {sorted(need)}")
            keep = {r["item_id"] for r in out if r["format"] == "open" and not r["correct"]}
            if scope == "mc_only":
                keep &= {r["item_id"] for r in out if r["format"] == "mc" and r["correct"]}
            targets = [r for r in rows if r["item_id"] in keep]
        out += recovery_rows(eng, ctx, targets, exemplars=exemplars or {}, progress=progress)
    return out


def _open_and_mc(eng, ctx: RowContext, rows, want, progress) -> list[dict]:
    """The `open` and `mc` rows: one request per item, its golds and (with mc) its options
    scored, and (with open) its greedy answer decoded from the same prompt."""
    toks, settings = ctx.toks, ctx.settings
    budget = budgets(toks, rows, settings.max_new_tokens, settings.budget_margin)
    texts, ids, order = format_prompts(toks, settings, rows, "open")
    bans = forbidden(toks, rows, settings)
    golds = {i: _gold_continuations(toks, texts[i], ids[i], rows[i]["answers"]) for i in order}
    options = _option_continuations(toks, rows, order, texts, ids) if "mc" in want else None
    requests = [
        Request(
            ids[i],
            rows[i]["item_id"],
            conts=[c for _, c in golds[i]] + ([c for c, _ in options[j]] if options else []),
            budget=budget[i] if "open" in want else 0,
            ban=bans[i] if bans is not None else None,
        )
        for j, i in enumerate(order)
    ]
    bar = tqdm(total=len(rows), desc=ctx.label("open+mc"), disable=not progress)
    answers = eng.score_and_greedy(requests, "open+mc", "open", on_done=bar.update)
    bar.close()
    out = []
    for j, i in enumerate(order):
        a, g = answers[j], golds[i]
        if "mc" in want:
            t0 = time.perf_counter()
            scores = [a.scores[len(g) :]]
            (row,) = _mc_rows(eng, rows, [i], texts, ids, [options[j]], scores, ctx.base)
            row["seconds"] = a.prompt_seconds + a.score_seconds + time.perf_counter() - t0
            out.append(row)
        if "open" in want:
            prompt = Prompted("open", texts[i], ids[i], budget[i])
            seconds = a.decode_seconds + a.prompt_seconds
            rank = _gold_rank(toks, g, a.scores[: len(g)])
            out.append(generated_row(ctx, rows[i], prompt, "greedy", a.tokens, seconds, **rank))
    return out


def _mc_nopassage(eng, ctx: RowContext, rows, progress) -> list[dict]:
    """The `mc_nopassage` rows: the mc options scored exactly as `mc` scores them, on the `mc`
    prompt with the passage left out (prompts.user_message). The guessing control: how often
    the question and the options alone pick the gold.

    The prompts are short (the template, the instruction, the question), so their batches are
    cheap; the native engine runs the tokens every prompt of a batch starts with (the
    template's head and the instruction) once per batch (engine.prefill's shared head).
    """
    toks = ctx.toks
    texts, ids, order = format_prompts(toks, ctx.settings, rows, "mc_nopassage")
    options = _option_continuations(toks, rows, order, texts, ids)
    requests = [
        Request(ids[i], rows[i]["item_id"], conts=[c for c, _ in options[j]])
        for j, i in enumerate(order)
    ]
    bar = tqdm(total=len(rows), desc=ctx.label("mc_nopassage"), disable=not progress)
    answers = eng.score_and_greedy(requests, "mc_nopassage", on_done=bar.update)
    bar.close()
    out = []
    for j, i in enumerate(order):
        a = answers[j]
        t0 = time.perf_counter()
        (row,) = _mc_rows(
            eng, rows, [i], texts, ids, [options[j]], [a.scores], ctx.base, "mc_nopassage"
        )
        row["seconds"] = a.prompt_seconds + a.score_seconds + time.perf_counter() - t0
        out.append(row)
    return out


def _gold_continuations(
    toks: Tokens, text: str, ids: list[int], answers
) -> list[tuple[str, list[int]]]:
    """(answer, ids) of every gold that continues the prompt at a token boundary."""
    out = []
    for a in answers:
        cont, start = toks.continuation(text, ids, a)
        if start == len(ids):
            out.append((a, cont))
    return out


_NO_GOLD = dict(
    gold_rank=None,
    gold_logprob=None,
    gold_token=None,
    gold_token_offset=None,
    gold_token_partial=None,
    gold_logprob_answer=None,
    gold_logprob_answer_per_byte=None,
)


def _gold_rank(
    toks: Tokens, golds: list[tuple[str, list[int]]], scores: list[engine.ContinuationScores]
) -> dict:
    """The gold columns of an `open` row (docs/logs.md), from the teacher-forced gold scores.

    Per gold, the ranked token is its first token with visible text: leading tokens that decode
    to whitespace only are teacher-forced and skipped (their count is gold_token_offset). Over
    several golds the best rank wins (ties: the first gold); gold_logprob_answer is the highest
    whole-answer log-prob over the golds, and its per-byte value that same gold's. All None
    when no gold starts at a token boundary after the prompt.
    """
    if not golds:
        return dict(_NO_GOLD)
    ranked = []
    for (_answer, cont), sc in zip(golds, scores, strict=True):
        offset = next((j for j, t in enumerate(cont) if not toks.is_blank(t)), len(cont) - 1)
        ranked.append((sc.ranks[offset], offset, cont[offset], sc.logprobs[offset]))
    k = min(range(len(ranked)), key=lambda j: ranked[j][0])
    rank, offset, token, logprob = ranked[k]
    whole = max(range(len(golds)), key=lambda j: scores[j].total)
    total = scores[whole].total
    return dict(
        gold_rank=int(rank),
        gold_logprob=float(logprob),
        gold_token=toks.text(token),
        gold_token_offset=offset,
        gold_token_partial=toks.is_partial(token),
        gold_logprob_answer=total,
        gold_logprob_answer_per_byte=total / max(1, len(golds[whole][0].encode("utf-8"))),
    )


def _option_continuations(
    toks: Tokens, rows, batch, texts, ids
) -> list[list[tuple[list[int], tuple | None]]]:
    """Per row, per option: (ids scored with the cache, None) or ([pad], (start, ids)) on a
    boundary merge."""
    out = []
    for i in batch:
        row = []
        for opt in rows[i]["options"]:
            cont, start = toks.continuation(texts[i], ids[i], opt)
            row.append((cont, None) if start == len(ids[i]) else ([toks.pad_id], (start, cont)))
        out.append(row)
    return out


def _mc_rows(eng, rows, batch, texts, ids, options, scores, base, fmt="mc") -> list[dict]:
    """The log rows of option scores (format `fmt`: mc, or mc_nopassage on its own prompt)."""
    out = []
    for b, i in enumerate(batch):
        r = rows[i]
        ll = [sc.total for sc in scores[b]]
        merged = [m for _, m in options[b]]
        for k, m in enumerate(merged):
            if m is not None:  # boundary merge: score from the shared prefix, without the cache
                start, cont = m
                ll[k] = eng.score_prefix(ids[i][:start], cont, fmt, r["item_id"])
        # lm-evaluation-harness's acc_norm divides by the option's length in characters, its
        # acc_bytes by the length in UTF-8 bytes (a CJK character is 3 bytes, a Thai one 3)
        opts = r["options"]
        per_char = [s / max(1, len(o)) for s, o in zip(ll, opts, strict=True)]
        per_byte = [s / max(1, len(o.encode("utf-8"))) for s, o in zip(ll, opts, strict=True)]
        pred = max(range(len(ll)), key=lambda k: ll[k])
        pred_norm = max(range(len(ll)), key=lambda k: per_char[k])
        pred_bytes = max(range(len(ll)), key=lambda k: per_byte[k])
        out.append(
            dict(
                base,
                item_id=r["item_id"],
                format=fmt,
                decode="loglik",
                prompt_id=prompt_id(texts[i]),
                output=r["options"][pred],
                answer_norm=normalize(r["options"][pred], r["lang"]),
                correct=pred == r["gold_option"],
                option_ll=ll,
                option_ll_per_char=per_char,
                option_ll_per_byte=per_byte,
                pred_option=pred,
                pred_option_norm=pred_norm,
                correct_norm=pred_norm == r["gold_option"],
                pred_option_bytes=pred_bytes,
                correct_bytes=pred_bytes == r["gold_option"],
                gold_option=r["gold_option"],
                n_prompt_tokens=len(ids[i]),
                n_output_tokens=0,
                boundary_merge=any(m is not None for m in merged),
            )
        )
    return out
