"""Evaluate a checkpoint on an item file in the `open`, `candidates` and `mc` formats.

Output: one row per item x format x sample, in the schema LOG_SCHEMA (documented in
docs/logs.md). The `open` prompt is run once per item: its prefill yields the gold first-token
rank, the MC option scores (through its KV cache) and the start of the greedy answer.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import polars as pl
import torch
from tqdm import tqdm

from . import engine
from .judge import first_line, judge, normalize
from .prompts import LETTERS, PromptSettings, adds_special_tokens, build_prompt, prompt_id
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
    max_length_factor: float = 3.0
    max_length_slack: int = 3
    seed: int = 0
    recovery: RecoverySettings = field(default_factory=RecoverySettings)


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
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

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


def _batches(order: list[int], size: int):
    for i in range(0, len(order), size):
        yield order[i : i + size]


def _prompts(toks: "Tokens", settings: "EvalSettings", rows: list[dict], fmt: str, exemplars: dict | None = None):
    """Prompt texts and ids of `rows` in format `fmt`, and the row order for length-sorted batches.

    exemplars: item_id -> item, for the `oneshot` format's worked example.
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
    order = sorted(range(len(rows)), key=lambda i: (len(ids[i]), rows[i]["item_id"]))
    return texts, ids, order


def _judge_row(output: str, item: dict, settings: EvalSettings) -> dict:
    j = judge(
        output,
        list(item["answers"]),
        item["lang"],
        question=item["question"],
        passage=item["context"],
        max_length_factor=settings.max_length_factor,
        max_length_slack=settings.max_length_slack,
    )
    return dict(correct=j.correct, exact_match=j.exact_match, f1=j.f1, contains=j.contains, echo=j.echo,
                too_long=j.too_long, answer_norm=normalize(first_line(output), item["lang"]))


_LABEL = re.compile(r"^\(?([A-Za-z])(?:[\).:]\s*(.*))?$")


def chosen_option(output: str, options: list[str], lang: str) -> tuple[int | None, str]:
    """Which option a `candidates` answer picks, and the text to judge.

    Models answer 'B', 'B.', '(B)' or 'B. text'. A leading label is removed: the text after
    it is what the model produced and is judged; a bare label stands for its option's text.
    The chosen option is the one whose normalised text equals the judged text, else the
    label's option, else None.
    """
    line = first_line(output)
    label = None
    m = _LABEL.match(line)
    if m and m.group(1).upper() in LETTERS[: len(options)]:
        label = LETTERS.index(m.group(1).upper())
        line = (m.group(2) or "").strip()
    if not line:
        return label, options[label] if label is not None else ""
    norm = normalize(line, lang)
    matches = [k for k, o in enumerate(options) if normalize(o, lang) == norm]
    return (matches[0] if len(matches) == 1 else label), line


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
    texts, ids, order = _prompts(toks, settings, rows, "open")
    out = []
    bar = tqdm(total=len(rows), desc=f"open+mc {base['dataset']}/{base['lang']}", disable=not progress)
    for batch in _batches(order, settings.batch_size):
        t0 = time.perf_counter()
        state = engine.prefill(model, [ids[i] for i in batch], toks.pad_id)
        t_prefill = time.perf_counter() - t0

        best = [_gold_rank(toks, texts[i], ids[i], rows[i]["answers"], state.last_logits[b]) for b, i in enumerate(batch)]

        if "mc" in want:
            t1 = time.perf_counter()
            out += _mc_rows(model, toks, rows, batch, texts, ids, state, base)
            t_mc = (time.perf_counter() - t1) / len(batch)
            for row in out[-len(batch):]:
                row["seconds"] = t_mc + t_prefill / len(batch)
        if "open" in want:
            t2 = time.perf_counter()
            gen = engine.greedy(model, state, settings.max_new_tokens, stop, toks.pad_id)
            t_gen = (time.perf_counter() - t2) / len(batch)
            for b, i in enumerate(batch):
                r = rows[i]
                text = toks.tok.decode(gen[b], skip_special_tokens=True)
                rank, lp, gtok = best[b]
                out.append(dict(
                    base, item_id=r["item_id"], format="open", decode="greedy", prompt_id=prompt_id(texts[i]),
                    output=text, **_judge_row(text, r, settings), gold_rank=rank, gold_logprob=lp,
                    gold_token=None if gtok is None else toks.tok.decode([gtok]),
                    gold_option=r["gold_option"], n_prompt_tokens=len(ids[i]), n_output_tokens=len(gen[b]),
                    seconds=t_gen + t_prefill / len(batch),
                ))
        bar.update(len(batch))
    bar.close()
    return out


def _gold_rank(toks: Tokens, text: str, ids: list[int], answers, logits: torch.Tensor):
    """(rank, log-prob, token id) of the best-ranked first token among the gold answers.

    None for all three when no gold starts at a token boundary after the prompt.
    """
    firsts = set()
    for a in answers:
        cont, start = toks.continuation(text, ids, a)
        if start == len(ids):
            firsts.add(cont[0])
    if not firsts:
        return None, None, None
    cand = sorted(firsts)
    ranks, logps = engine.token_ranks(logits[None].expand(len(cand), -1), torch.tensor(cand, device=logits.device))
    k = int(torch.argmin(ranks))
    return int(ranks[k]), float(logps[k]), cand[k]


def _mc_rows(model, toks: Tokens, rows, batch, texts, ids, state, base) -> list[dict]:
    conts, merged = [], []
    for i in batch:
        row_conts, row_merged = [], []
        for opt in rows[i]["options"]:
            cont, start = toks.continuation(texts[i], ids[i], opt)
            row_conts.append(cont if start == len(ids[i]) else [toks.pad_id])
            row_merged.append(None if start == len(ids[i]) else (start, cont))
        conts.append(row_conts)
        merged.append(row_merged)
    scores = engine.score_continuations(model, state, conts, toks.pad_id)
    out = []
    for b, i in enumerate(batch):
        r = rows[i]
        ll = list(scores[b])
        for k, m in enumerate(merged[b]):
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
            n_prompt_tokens=len(ids[i]), n_output_tokens=0, boundary_merge=any(m is not None for m in merged[b]),
        ))
    return out


def _greedy_format(model, toks: Tokens, rows, settings, stop, base, progress, fmt: str,
                   exemplars: dict | None = None, max_new_tokens: int | None = None) -> list[dict]:
    """Greedy answers in a format with its own prompt: `candidates` or `oneshot`."""
    texts, ids, order = _prompts(toks, settings, rows, fmt, exemplars)
    out = []
    bar = tqdm(total=len(rows), desc=f"{fmt} {base['dataset']}/{base['lang']}", disable=not progress)
    for batch in _batches(order, settings.batch_size):
        t0 = time.perf_counter()
        state = engine.prefill(model, [ids[i] for i in batch], toks.pad_id)
        gen = engine.greedy(model, state, max_new_tokens or settings.max_new_tokens, stop, toks.pad_id)
        dt = (time.perf_counter() - t0) / len(batch)
        for b, i in enumerate(batch):
            r = rows[i]
            text = toks.tok.decode(gen[b], skip_special_tokens=True)
            k, judged = chosen_option(text, list(r["options"]), r["lang"]) if fmt == "candidates" else (None, text)
            out.append(dict(
                base, item_id=r["item_id"], format=fmt, decode="greedy", prompt_id=prompt_id(texts[i]),
                output=text, **_judge_row(judged, r, settings), pred_option=k, gold_option=r["gold_option"],
                n_prompt_tokens=len(ids[i]), n_output_tokens=len(gen[b]), seconds=dt,
            ))
        bar.update(len(batch))
    bar.close()
    return out
