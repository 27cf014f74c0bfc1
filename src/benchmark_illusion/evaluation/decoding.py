"""Building blocks shared by the evaluation formats (evaluate.py) and the recovery decodes
(recovery.py): tokenisation at the prompt/answer boundary, prompts per format, generation
budgets, length-sorted batches, the judge's columns of a row, and the greedy decode of a
format with its own prompt (`candidates`, `oneshot`)."""

from __future__ import annotations

from dataclasses import dataclass

from tqdm import tqdm

from benchmark_illusion.evaluation import engine, generation
from benchmark_illusion.evaluation.candidates import judge_candidates
from benchmark_illusion.evaluation.judge import JudgeLimits, judge
from benchmark_illusion.evaluation.prompts import (
    PromptSettings,
    adds_special_tokens,
    build_prompt,
    prompt_id,
)
from benchmark_illusion.evaluation.settings import EvalSettings


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

    def gold_first_tokens(self, answers) -> list[int]:
        """The tokens a gold can start with when written: the first token of every gold alone,
        after a space and after the continuation separator, as written and with its first
        letter upper- and lower-cased; blank tokens (a lone space) left out. What the positive
        control forbids."""
        out = set()
        for a in answers:
            a = a.strip()
            if not a:
                continue
            for v in {a, a[0].upper() + a[1:], a[0].lower() + a[1:]}:
                for prefix in {"", " ", self.sep}:
                    ids = self.tok(prefix + v, add_special_tokens=False)["input_ids"]
                    first = next((i for i in ids if not self.is_blank(i)), None)
                    if first is not None:
                        out.add(first)
        return sorted(out)

    def continuation(
        self, prompt_text: str, prompt_ids: list[int], answer: str
    ) -> tuple[list[int], int]:
        """Ids of `answer` as it continues the prompt, tokenised together with it.

        Returns (ids, start): `start` is where they begin in the joint tokenisation; it is
        shorter than the prompt when the answer's first characters merge with the prompt's
        last token (a boundary merge), in which case the caller must score from `start`.
        """
        joint = self.encode(prompt_text + self.sep + answer)
        start = 0
        for a, b in zip(joint, prompt_ids, strict=False):  # joint may be shorter or longer
            if a != b:
                break
            start += 1
        if start == len(prompt_ids) and len(joint) == start:
            raise ValueError(f"answer {answer!r} adds no tokens to the prompt")
        return joint[start:], start


class BatchItems:
    """A context (reusable) that adds the format and the batch's item ids, in the batch's row
    order, to a NonFiniteError raised inside it (engine.NonFiniteError.locate)."""

    def __init__(self, fmt: str, item_ids: list[str]):
        self.fmt, self.item_ids = fmt, item_ids

    def __enter__(self) -> BatchItems:
        return self

    def __exit__(self, kind, err, tb) -> bool:
        if isinstance(err, engine.NonFiniteError):
            err.locate(self.fmt, self.item_ids)
        return False  # the error goes on


def stop_rule(model, tokenizer) -> generation.StopRule:
    """When a decode ends: the tokenizer's end-of-sequence token and the model's generation
    config's (an instruct model's end-of-turn token), and a line break after content."""
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    extra = [] if eos is None else list(eos) if isinstance(eos, (list, tuple)) else [eos]
    return generation.StopRule.for_tokenizer(tokenizer, extra)


# A batch of length-sorted prompts ends before a prompt this many times longer than its
# first: padding the short rows to the long one's length would waste more than a fifth of the
# batch's forward (XQuAD's longest prompts are 2-3x the median).
LENGTH_SLACK = 1.25


def batches(
    order: list[int],
    size: int,
    budgets: list[int] | None = None,
    lengths: list[int] | None = None,
    max_tokens: int | None = None,
):
    """Consecutive runs of `order` of at most `size` rows; with `budgets`, one budget per batch;
    with `lengths` (and `order` sorted by them), no row longer than LENGTH_SLACK times the
    batch's first, and with `max_tokens` no more rows than fit that many tokens padded to the
    batch's longest (a row longer than max_tokens runs alone)."""
    batch: list[int] = []
    for i in order:
        if batch and (
            len(batch) == size
            or (budgets is not None and budgets[i] != budgets[batch[0]])
            or (lengths is not None and lengths[i] > LENGTH_SLACK * lengths[batch[0]])
            or (
                max_tokens is not None
                and lengths is not None
                and (len(batch) + 1) * max(lengths[i], max(lengths[j] for j in batch)) > max_tokens
            )
        ):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def prefill_batches(order: list[int], ids: list[list[int]], settings: EvalSettings):
    """The prefill batches of the greedy formats and mc: `batches` of `order` (length-sorted
    prompt ids) with settings.batch_size rows and settings.batch_tokens tokens at most."""
    return batches(order, settings.batch_size, None, [len(x) for x in ids], settings.batch_tokens)


def forbidden(toks: Tokens, rows: list[dict], settings) -> list[list[int]] | None:
    """Per row, the tokens its decodes may not write: each gold's first tokens when the
    settings ask for it (the positive control), else None."""
    if not getattr(settings, "forbid_gold_first_token", False):
        return None
    return [toks.gold_first_tokens(r["answers"]) for r in rows]


def gold_tokens(toks: Tokens, answers) -> int:
    """Tokens the longest gold takes when written after the prompt (separator included)."""
    return max(
        (len(toks.tok(toks.sep + a, add_special_tokens=False)["input_ids"]) for a in answers),
        default=0,
    )


def budgets(toks: Tokens, rows: list[dict], floor: int, margin: int) -> list[int]:
    """Per row, new tokens a decode may write: `floor`, raised to the longest gold + `margin`.

    A budget shorter than the gold would make the answer impossible to produce: the item
    would count as wrong (or erased) by construction. The budget is logged per row.
    """
    return [max(floor, gold_tokens(toks, r["answers"]) + margin) for r in rows]


def format_prompts(
    toks: Tokens,
    settings: EvalSettings,
    rows: list[dict],
    fmt: str,
    exemplars: dict | None = None,
    budget: list[int] | None = None,
):
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
                raise ValueError(
                    f"item {r['item_id']!r}: its 1-shot exemplar {r.get('exemplar_id')!r} "
                    "is not in the item table"
                )
        texts.append(build_prompt(toks.tok, settings.prompt, r, fmt, exemplar=ex))
    ids = [toks.encode(t) for t in texts]
    order = sorted(
        range(len(rows)),
        key=lambda i: (budget[i] if budget else 0, len(ids[i]), rows[i]["item_id"]),
    )
    return texts, ids, order


def judge_row(output: str, item: dict, settings: EvalSettings, fmt: str = "open") -> dict:
    """The judge's columns of a generated row (docs/logs.md); `candidates` rows also get
    pred_option."""
    lang = item["lang"]
    common = dict(
        question=item["question"],
        passage=item["context"],
        limits=JudgeLimits(
            settings.max_length_factor, settings.max_length_slack, settings.sentence_slack
        ),
    )
    if fmt == "candidates":
        letters = settings.prompt.candidates_style == "letters"
        j = judge_candidates(
            output, list(item["options"]), item["gold_option"], lang, letters=letters, **common
        )
    else:
        options = item.get("options")
        options = None if options is None else list(options)
        j = judge(output, list(item["answers"]), lang, options=options, **common)
    row = j.log_columns(lang)
    if fmt == "candidates":
        row["pred_option"] = j.pred_option
    elif options is not None:
        # false recovery: every option judged as if it were the gold (same judge and rules,
        # hedges included); the distractors' entries say whether the output produces one, and
        # a distractor's occurrence that overlaps a gold's ("of grey" in "made of grey stone",
        # gold "grey stone") is no hit
        golds = list(item["answers"])
        verdicts = [
            judge(
                output,
                [o],
                lang,
                options=options,
                rivals=None if k == item["gold_option"] else golds,
                **common,
            )
            for k, o in enumerate(options)
        ]
        row.update(
            option_correct=[v.correct for v in verdicts],
            option_correct_sentence=[v.correct_sentence for v in verdicts],
        )
        decoy = decoy_option(item)
        if decoy is not None:
            row.update(decoy_option=decoy, decoy_correct=verdicts[decoy].correct)
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


def greedy_format(
    eng,
    ctx: RowContext,
    rows,
    fmt: str,
    *,
    stop=None,
    progress: bool = True,
    exemplars: dict | None = None,
    max_new_tokens: int | None = None,
) -> list[dict]:
    """Greedy answers in a format with its own prompt: `candidates` or `oneshot`.

    eng: an engine (engines.Engine), or a transformers model for the native engine (with
    `stop`, its stop rule; None: from the model). max_new_tokens: the budget floor (default:
    evaluation.max_new_tokens); each row's budget is raised to its longest gold +
    budget_margin (see `budgets`).
    """
    from benchmark_illusion.evaluation.engines import decode_requests
    from benchmark_illusion.evaluation.engines.native import as_engine

    toks, settings = ctx.toks, ctx.settings
    eng = as_engine(eng, toks.tok, settings, stop)
    budget = budgets(toks, rows, max_new_tokens or settings.max_new_tokens, settings.budget_margin)
    # greedy takes a budget per row: batches are cut by prompt length only
    texts, ids, order = format_prompts(toks, settings, rows, fmt, exemplars)
    bans = forbidden(toks, rows, settings)
    requests = decode_requests(ids, rows, order, budget, bans)
    bar = tqdm(total=len(rows), desc=ctx.label(fmt), disable=not progress)
    answers = eng.score_and_greedy(requests, fmt, on_done=bar.update)
    bar.close()
    out = []
    for j, i in enumerate(order):
        a = answers[j]
        prompt = Prompted(fmt, texts[i], ids[i], budget[i])
        seconds = a.prompt_seconds + a.decode_seconds
        out.append(generated_row(ctx, rows[i], prompt, "greedy", a.tokens, seconds))
    return out


@dataclass(frozen=True)
class RowContext:
    """What every row of one evaluation shares: the tokenisation, the settings and the base
    columns (the checkpoint's key and hashes, dataset, lang, seed: evaluate.evaluate_items)."""

    toks: Tokens
    settings: EvalSettings
    base: dict

    def label(self, what: str) -> str:
        """A progress bar's label: what runs, on which dataset and language."""
        return f"{what} {self.base['dataset']}/{self.base['lang']}"


@dataclass(frozen=True)
class Prompted:
    """One item's prompt in one format: its text, its ids and its generation budget."""

    fmt: str
    text: str
    ids: list[int]
    budget: int


def generated_row(
    ctx: RowContext,
    item: dict,
    prompt: Prompted,
    decode: str,
    gen: list[int],
    seconds: float,
    sample: int = 0,
    **extra,
) -> dict:
    """The log row of one generated answer (any format and decode), judged (docs/logs.md)."""
    text = ctx.toks.tok.decode(gen, skip_special_tokens=True)
    return dict(
        ctx.base,
        item_id=item["item_id"],
        format=prompt.fmt,
        decode=decode,
        sample=sample,
        prompt_id=prompt_id(prompt.text),
        output=text,
        **judge_row(text, item, ctx.settings, prompt.fmt),
        **extra,
        gold_option=item["gold_option"],
        n_prompt_tokens=len(prompt.ids),
        n_output_tokens=len(gen),
        max_new_tokens=prompt.budget,
        seconds=seconds,
    )
