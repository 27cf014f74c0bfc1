"""Evaluate a checkpoint on an item file in the `open`, `candidates` and `mc` formats.

Output: one row per item x format x sample, in the schema LOG_SCHEMA (documented in
docs/logs.md). The `open` prompt is run once per item: its prefill yields the gold first-token
rank, the MC option scores (through its KV cache) and the start of the greedy answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import polars as pl
import torch
from tqdm import tqdm

from . import engine
from .judge import judge, judge_candidates, normalize
from .prompts import PromptSettings, adds_special_tokens, build_prompt, prompt_id
from .recovery import RecoverySettings
from .schema import LOG_SCHEMA

FORMATS = ("open", "candidates", "mc")



@dataclass(frozen=True)
class EvalSettings:
    """Everything that decides an evaluation's output besides the checkpoint and the items."""

    prompt: PromptSettings = field(default_factory=PromptSettings)
    formats: tuple[str, ...] = FORMATS
    batch_size: int = 8
    max_new_tokens: int = 32
    budget_margin: int = 4
    max_length_factor: float = 3.0
    max_length_slack: int = 3
    seed: int = 1234
    recovery: RecoverySettings = field(default_factory=RecoverySettings.only)  # off unless asked


@dataclass(frozen=True)
class RunMeta:
    """Identity columns written on every row."""

    model: str
    method: str = "dense"
    structure: str = "none"
    sparsity: float = 0.0
    dataset: str = ""
    lang: str = ""
    model_hash: str = ""
    config_hash: str = ""


class Tokens:
    """Tokenisation that keeps prompt/continuation boundaries right."""

    def __init__(self, tokenizer, settings: PromptSettings):
        self.tok = tokenizer
        self.special = adds_special_tokens(tokenizer, settings)
        self.sep = settings.continuation_sep
        self.pad_id = engine.pad_id(tokenizer)
        self._text: dict[int, str] = {}

    def text(self, token_id: int) -> str:
        """The token's text decoded alone (cached)."""
        if token_id not in self._text:
            self._text[token_id] = self.tok.decode([token_id])
        return self._text[token_id]

    def is_blank(self, token_id: int) -> bool:
        """The token decodes to whitespace only (or to nothing)."""
        return not self.text(token_id).strip()

    def is_partial(self, token_id: int) -> bool:
        """The token holds part of a character only (byte fallback): alone it decodes to U+FFFD."""
        return "\ufffd" in self.text(token_id)

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=self.special)["input_ids"]

    def continuation(self, prompt_text: str, prompt_ids: list[int], answer: str) -> tuple[list[int], int]:
        """Ids of `answer` as it continues the prompt, tokenised together with it.

        Returns (ids, start): `start` is where they begin in the joint tokenisation; it is
        shorter than the prompt when the answer's first characters merge with the prompt's
        last token (a boundary merge), in which case the caller must score from `start`.
        """
        joint = self.encode(prompt_text + self.sep + answer)
        start = 0
        for a, b in zip(joint, prompt_ids):
            if a != b:
                break
            start += 1
        if start == len(prompt_ids) and len(joint) == start:
            raise ValueError(f"answer {answer!r} adds no tokens to the prompt")
        return joint[start:], start


@torch.inference_mode()
def naive_logprob(model, prefix: list[int], cont: list[int]) -> float:
    """Sum log p(cont | prefix) by one full forward pass (the reference path)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prefix + cont], device=device)
    logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    n = len(prefix)
    return float(sum(logp[n - 1 + j, t] for j, t in enumerate(cont)))


def _batches(order: list[int], size: int, budgets: list[int] | None = None):
    """Consecutive runs of `order` of at most `size` rows; with `budgets`, one budget per batch."""
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) == size or (budgets is not None and budgets[i] != budgets[batch[0]])):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def gold_tokens(toks: "Tokens", answers) -> int:
    """Tokens the longest gold takes when written after the prompt (separator included)."""
    return max((len(toks.tok(toks.sep + a, add_special_tokens=False)["input_ids"]) for a in answers), default=0)


def budgets(toks: "Tokens", rows: list[dict], floor: int, margin: int) -> list[int]:
    """Per row, new tokens a decode may write: `floor`, raised to the longest gold + `margin`.

    A budget shorter than the gold would make the answer impossible to produce: the item
    would count as wrong (or erased) by construction. The budget is logged per row.
    """
    return [max(floor, gold_tokens(toks, r["answers"]) + margin) for r in rows]


def _prompts(toks: "Tokens", settings: "EvalSettings", rows: list[dict], fmt: str, exemplars: dict | None = None,
             budget: list[int] | None = None):
    """Prompt texts and ids of `rows` in format `fmt`, and the row order for length-sorted batches.

    exemplars: item_id -> item, for the `oneshot` format's worked example.
    budget: per-row generation budgets; rows are grouped by budget first (one budget per batch).
    """
    texts = []
    for r in rows:
        ex = None
        if fmt == "oneshot":
            ex = (exemplars or {}).get(r.get("exemplar_id"))
            if ex is None:
                raise ValueError(f"item {r['item_id']!r}: its 1-shot exemplar {r.get('exemplar_id')!r} "
                                 "is not in the item table")
        texts.append(build_prompt(toks.tok, settings.prompt, r, fmt, exemplar=ex))
    ids = [toks.encode(t) for t in texts]
    order = sorted(range(len(rows)), key=lambda i: (budget[i] if budget else 0, len(ids[i]), rows[i]["item_id"]))
    return texts, ids, order


def _judge_row(output: str, item: dict, settings: EvalSettings, fmt: str = "open") -> dict:
    """The judge's columns of a generated row (docs/logs.md); `candidates` rows also get pred_option."""
    lang = item["lang"]
    common = dict(question=item["question"], passage=item["context"],
                  max_length_factor=settings.max_length_factor, max_length_slack=settings.max_length_slack)
    if fmt == "candidates":
        letters = settings.prompt.candidates_style == "letters"
        j = judge_candidates(output, list(item["options"]), item["gold_option"], lang, letters=letters, **common)
    else:
        options = item.get("options")
        options = None if options is None else list(options)
        j = judge(output, list(item["answers"]), lang, options=options, **common)
    row = dict(correct=j.correct, exact_match=j.exact_match, f1=j.f1, contains=j.contains, echo=j.echo,
               too_long=j.too_long, hedge=j.hedge, repeat=j.repeat, options_named=j.options_named,
               answer_norm=normalize(j.judged, lang))
    if fmt == "candidates":
        row["pred_option"] = j.pred_option
    else:
        decoy = decoy_option(item)
        if decoy is not None:
            d = judge(output, [options[decoy]], lang, options=options, **common)
            row.update(decoy_option=decoy, decoy_correct=d.correct)
    return row


def decoy_option(item: dict) -> int | None:
    """The distractor judged as if it were the gold (the false-recovery control), or None.

    Fixed per item: the option after the gold (wrapping). Options are in seeded random order,
    so this is a seeded random distractor, the same for every checkpoint and decode.
    """
    options, gold = item.get("options"), item.get("gold_option")
    if options is None or gold is None or len(options) < 2:
        return None
    return (gold + 1) % len(options)


def evaluate_items(model, tokenizer, items: pl.DataFrame, settings: EvalSettings, meta: RunMeta,
                   progress: bool = True, exemplars: dict[str, dict] | None = None) -> pl.DataFrame:
    """Run every requested format, then the enabled recovery decodes; return the log rows (LOG_SCHEMA).

    exemplars: item_id -> item for the 1-shot examples (needed when recovery.oneshot is on).
    """
    unknown = set(settings.formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown formats {sorted(unknown)}; known: {FORMATS}")
    torch.manual_seed(settings.seed)
    toks = Tokens(tokenizer, settings.prompt)
    stop = engine.StopRule.for_tokenizer(tokenizer, _extra_stop_ids(model))
    rows = items.to_dicts()
    base = dict(
        model=meta.model, method=meta.method, structure=meta.structure, sparsity=float(meta.sparsity),
        dataset=meta.dataset, lang=meta.lang, seed=settings.seed, model_hash=meta.model_hash,
        config_hash=meta.config_hash, sample=0,
    )
    out: list[dict] = []
    want = set(settings.formats)
    if want & {"open", "mc"}:
        out += _open_and_mc(model, toks, rows, settings, stop, base, want, progress)
    if "candidates" in want:
        out += _greedy_format(model, toks, rows, settings, stop, base, progress, "candidates")
    if settings.recovery.any:
        from .recovery import recovery_rows

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
        out += recovery_rows(model, toks, targets, settings, stop, base, exemplars or {}, progress)
    df = pl.DataFrame(out, schema=LOG_SCHEMA)
    return df.sort(["item_id", "format", "decode", "sample"])


def _extra_stop_ids(model) -> list[int]:
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if eos is None:
        return []
    return list(eos) if isinstance(eos, (list, tuple)) else [eos]


def _open_and_mc(model, toks: Tokens, rows, settings, stop, base, want, progress) -> list[dict]:
    budget = budgets(toks, rows, settings.max_new_tokens, settings.budget_margin)
    texts, ids, order = _prompts(toks, settings, rows, "open", budget=budget)
    out = []
    bar = tqdm(total=len(rows), desc=f"open+mc {base['dataset']}/{base['lang']}", disable=not progress)
    for batch in _batches(order, settings.batch_size, budget):
        t0 = time.perf_counter()
        state = engine.prefill(model, [ids[i] for i in batch], toks.pad_id)
        t_prefill = time.perf_counter() - t0

        t1 = time.perf_counter()
        golds = [_gold_continuations(toks, texts[i], ids[i], rows[i]["answers"]) for i in batch]
        options = _option_continuations(toks, rows, batch, texts, ids) if "mc" in want else None
        conts = [[c for _, c in g] + ([c for c, _ in options[b]] if options else []) for b, g in enumerate(golds)]
        scores = engine.score_tokens(model, state, conts, toks.pad_id)
        best = [_gold_rank(toks, g, scores[b][: len(g)]) for b, g in enumerate(golds)]
        if "mc" in want:
            out += _mc_rows(model, rows, batch, texts, ids, options, [sc[len(g):] for sc, g in zip(scores, golds)], base)
            t_mc = (time.perf_counter() - t1) / len(batch)
            for row in out[-len(batch):]:
                row["seconds"] = t_mc + t_prefill / len(batch)
        if "open" in want:
            t2 = time.perf_counter()
            gen = engine.greedy(model, state, budget[batch[0]], stop, toks.pad_id)
            t_gen = (time.perf_counter() - t2) / len(batch)
            for b, i in enumerate(batch):
                r = rows[i]
                text = toks.tok.decode(gen[b], skip_special_tokens=True)
                out.append(dict(
                    base, item_id=r["item_id"], format="open", decode="greedy", prompt_id=prompt_id(texts[i]),
                    output=text, **_judge_row(text, r, settings), **best[b],
                    gold_option=r["gold_option"], n_prompt_tokens=len(ids[i]), n_output_tokens=len(gen[b]),
                    max_new_tokens=budget[i], seconds=t_gen + t_prefill / len(batch),
                ))
        bar.update(len(batch))
    bar.close()
    return out


def _gold_continuations(toks: Tokens, text: str, ids: list[int], answers) -> list[tuple[str, list[int]]]:
    """(answer, ids) of every gold that continues the prompt at a token boundary."""
    out = []
    for a in answers:
        cont, start = toks.continuation(text, ids, a)
        if start == len(ids):
            out.append((a, cont))
    return out


_NO_GOLD = dict(gold_rank=None, gold_logprob=None, gold_token=None, gold_token_offset=None,
                gold_token_partial=None, gold_logprob_answer=None, gold_logprob_answer_per_byte=None)


def _gold_rank(toks: Tokens, golds: list[tuple[str, list[int]]], scores: list[engine.ContinuationScores]) -> dict:
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
    for (answer, cont), sc in zip(golds, scores):
        offset = next((j for j, t in enumerate(cont) if not toks.is_blank(t)), len(cont) - 1)
        ranked.append((sc.ranks[offset], offset, cont[offset], sc.logprobs[offset]))
    k = min(range(len(ranked)), key=lambda j: ranked[j][0])
    rank, offset, token, logprob = ranked[k]
    whole = max(range(len(golds)), key=lambda j: scores[j].total)
    total = scores[whole].total
    return dict(
        gold_rank=int(rank), gold_logprob=float(logprob), gold_token=toks.text(token), gold_token_offset=offset,
        gold_token_partial=toks.is_partial(token), gold_logprob_answer=total,
        gold_logprob_answer_per_byte=total / max(1, len(golds[whole][0].encode("utf-8"))),
    )


def _option_continuations(toks: Tokens, rows, batch, texts, ids) -> list[list[tuple[list[int], tuple | None]]]:
    """Per row, per option: (ids scored with the cache, None) or ([pad], (start, ids)) on a boundary merge."""
    out = []
    for i in batch:
        row = []
        for opt in rows[i]["options"]:
            cont, start = toks.continuation(texts[i], ids[i], opt)
            row.append((cont, None) if start == len(ids[i]) else ([toks.pad_id], (start, cont)))
        out.append(row)
    return out


def _mc_rows(model, rows, batch, texts, ids, options, scores, base) -> list[dict]:
    out = []
    for b, i in enumerate(batch):
        r = rows[i]
        ll = [sc.total for sc in scores[b]]
        merged = [m for _, m in options[b]]
        for k, m in enumerate(merged):
            if m is not None:  # boundary merge: score from the shared prefix, without the cache
                start, cont = m
                ll[k] = naive_logprob(model, ids[i][:start], cont)
        per_byte = [s / max(1, len(o.encode("utf-8"))) for s, o in zip(ll, r["options"])]
        pred = max(range(len(ll)), key=lambda k: ll[k])
        pred_norm = max(range(len(ll)), key=lambda k: per_byte[k])
        out.append(dict(
            base, item_id=r["item_id"], format="mc", decode="loglik", prompt_id=prompt_id(texts[i]),
            output=r["options"][pred], answer_norm=normalize(r["options"][pred], r["lang"]),
            correct=pred == r["gold_option"], option_ll=ll,
            option_ll_per_byte=per_byte, pred_option=pred, pred_option_norm=pred_norm,
            correct_norm=pred_norm == r["gold_option"], gold_option=r["gold_option"],
            n_prompt_tokens=len(ids[i]), n_output_tokens=0, boundary_merge=any(m is not None for m in merged),
        ))
    return out


def _greedy_format(model, toks: Tokens, rows, settings, stop, base, progress, fmt: str,
                   exemplars: dict | None = None, max_new_tokens: int | None = None) -> list[dict]:
    """Greedy answers in a format with its own prompt: `candidates` or `oneshot`.

    max_new_tokens: the budget floor (default: evaluation.max_new_tokens); each row's budget is
    raised to its longest gold + budget_margin (see `budgets`).
    """
    budget = budgets(toks, rows, max_new_tokens or settings.max_new_tokens, settings.budget_margin)
    texts, ids, order = _prompts(toks, settings, rows, fmt, exemplars, budget=budget)
    out = []
    bar = tqdm(total=len(rows), desc=f"{fmt} {base['dataset']}/{base['lang']}", disable=not progress)
    for batch in _batches(order, settings.batch_size, budget):
        t0 = time.perf_counter()
        state = engine.prefill(model, [ids[i] for i in batch], toks.pad_id)
        gen = engine.greedy(model, state, budget[batch[0]], stop, toks.pad_id)
        dt = (time.perf_counter() - t0) / len(batch)
        for b, i in enumerate(batch):
            r = rows[i]
            text = toks.tok.decode(gen[b], skip_special_tokens=True)
            out.append(dict(
                base, item_id=r["item_id"], format=fmt, decode="greedy", prompt_id=prompt_id(texts[i]),
                output=text, **_judge_row(text, r, settings, fmt), gold_option=r["gold_option"],
                n_prompt_tokens=len(ids[i]), n_output_tokens=len(gen[b]), max_new_tokens=budget[i], seconds=dt,
            ))
        bar.update(len(batch))
    bar.close()
    return out
