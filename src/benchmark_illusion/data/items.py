"""Turn normalised raw QA rows into evaluation items with multiple-choice distractors.

Input rows have the columns id, lang, title, context, question, answers (list[str]) and
answer_starts (list[int]). `validate_rows` drops bad rows, counting every dropped row
under exactly one reason; `build_items` gives each valid row n distractors, a shuffled
option list and a 1-shot exemplar.

Distractors (`build_items(..., distractors=...)`, config `items.distractors`):
  * 'passage' (the default): every distractor occurs verbatim in the item's own passage,
    so "which option is written in the passage" cannot tell the gold apart. In order:
    the first answers of the other questions on the same passage; the first answers of
    other questions of the language that occur in this passage (verbatim, on judge-token
    boundaries); then spans of the passage. Every source keeps only candidates of the
    gold's kind (number / capitalised / other, `text_kind`), so no option stands out as the
    only number or the only name; the last two also only of the gold's length
    (`length_range`; see `PassageSpans` and `choose_passage_distractors`);
  * 'other_answers' (the behaviour before 'passage' existed, kept exactly): the first
    answers of the other questions on the same passage, then first answers of other items
    of the language, same kind (numeric or text) first.
distractor_sources says where each came from: 'answer' (another question's first answer,
found in this passage in 'passage' mode, of the same passage in 'other_answers' mode),
'span' (a span of the passage) or 'other_passage' (an answer of another passage,
'other_answers' mode only); distractors_in_passage says whether all three occur verbatim
in the passage (always true in 'passage' mode).

Determinism. Everything random about an item is derived from a 64-bit key hashed
(blake2b) from (seed, item id), never from Python's hash() or from row order:
  * candidate distractors are ranked by a keyed mix of the item key and a hash of the
    candidate's text, so their relative order for an item does not depend on which
    other candidates exist. Adding or removing items changes an item's distractors only
    if an added answer outranks one it had, or a removed answer was one of them (in
    'passage' mode, an added answer that occurs in the item's passage can displace a
    span);
  * the option order is a shuffle by random.Random(item key);
  * the exemplar is the same-language item with a different context whose id ranks
    first under the same keyed mix.
"""

from __future__ import annotations

import random

import numpy as np
import polars as pl

from benchmark_illusion import language
from benchmark_illusion.data.answers import is_numeric
from benchmark_illusion.data.distractors import (
    AnswerPool,
    choose_distractors,
    choose_passage_distractors,
    item_key,
    keyed_rank,
    stable_u64,
)
from benchmark_illusion.data.spans import PassageSpans, text_kind
from benchmark_illusion.textnorm import normalize, tokenize

REASONS = (
    "empty_id",
    "duplicate_id",
    "empty_context",
    "empty_question",
    "empty_answer",
    "answer_not_in_passage",
)
DISTRACTOR_MODES = ("passage", "other_answers")
DISTRACTOR_SOURCES = ("answer", "span", "other_passage")
_MAX_EXAMPLES = 5

ITEM_SCHEMA = {
    "item_id": pl.String,
    "lang": pl.String,
    "title": pl.String,
    "context": pl.String,
    "question": pl.String,
    "answers": pl.List(pl.String),
    "options": pl.List(pl.String),
    "gold_option": pl.Int64,
    "distractor_sources": pl.List(pl.String),
    "distractors_in_passage": pl.Boolean,
    "exemplar_id": pl.String,
    "answer_kind": pl.String,
    "seed": pl.Int64,
}


# ---------------------------------------------------------------------------
# Validation


def _clean_answers(
    answers: list | None, starts: list | None, lang: str
) -> tuple[list[str], list[int]]:
    """Strip answers; drop blank, punctuation-only and repeated ones, keeping order.

    answer_starts stay aligned with the kept answers (shifted past stripped leading
    whitespace); a start that is missing from the input becomes -1.
    """
    answers = answers or []
    starts = starts or []
    kept: list[str] = []
    kept_starts: list[int] = []
    for i, raw in enumerate(answers):
        if raw is None:
            continue
        text = raw.strip()
        # An answer with nothing left after normalisation can never be matched by the
        # judge, so it is as useless as a blank one.
        if not text or not normalize(text, lang) or text in kept:
            continue
        start = starts[i] if i < len(starts) and starts[i] is not None else -1
        if start >= 0:
            start += len(raw) - len(raw.lstrip())
        kept.append(text)
        kept_starts.append(start)
    return kept, kept_starts


def _bad_reason(row: dict, answers: list[str], seen_ids: set[str], extractive: bool) -> str | None:
    """The first reason (in REASONS order) that makes `row` unusable, or None."""
    row_id = row.get("id") or ""
    if not row_id.strip():
        return "empty_id"
    if row_id in seen_ids:
        return "duplicate_id"
    context = row.get("context") or ""
    if not context.strip():
        return "empty_context"
    if not (row.get("question") or "").strip():
        return "empty_question"
    if not answers:
        return "empty_answer"
    if extractive and not any(a in context for a in answers):
        return "answer_not_in_passage"
    return None


def validate_rows(df: pl.DataFrame, extractive: bool) -> tuple[pl.DataFrame, dict]:
    """Return (good rows, report) for raw QA rows.

    Every input row is either kept or counted under exactly one reason, checked in the
    order of REASONS: 'empty_id'; 'duplicate_id' (the first occurrence of an id in input
    order claims it, whether or not that row is itself valid); 'empty_context';
    'empty_question'; 'empty_answer' (no answer left after stripping and dropping
    punctuation-only answers); 'answer_not_in_passage' (only if `extractive`: no kept
    answer occurs verbatim in the context). Kept rows have their answers stripped and
    de-duplicated in order, answer_starts aligned. Row order and schema are kept.

    The report has one count per reason, 'n_input', 'n_valid' and 'examples'
    (reason -> up to 5 offending ids, in input order).
    """
    counts = {reason: 0 for reason in REASONS}
    examples: dict[str, list] = {reason: [] for reason in REASONS}
    seen_ids: set[str] = set()
    good: list[dict] = []
    for row in df.to_dicts():
        answers, starts = _clean_answers(
            row.get("answers"), row.get("answer_starts"), row.get("lang") or ""
        )
        reason = _bad_reason(row, answers, seen_ids, extractive)
        if row.get("id"):
            seen_ids.add(row["id"])
        if reason is not None:
            counts[reason] += 1
            if len(examples[reason]) < _MAX_EXAMPLES:
                examples[reason].append(row.get("id"))
            continue
        good.append({**row, "answers": answers, "answer_starts": starts})
    report = {**counts, "n_input": df.height, "n_valid": len(good), "examples": examples}
    return pl.DataFrame(good, schema=df.schema), report


# ---------------------------------------------------------------------------
# Items


def build_items(
    df: pl.DataFrame, seed: int, n_distractors: int = 3, distractors: str = "passage"
) -> tuple[pl.DataFrame, dict]:
    """Build multiple-choice items from the good rows of `validate_rows`.

    For each row: n_distractors distractors chosen as `distractors` says (one of
    DISTRACTOR_MODES; see the module docstring):
      * 'passage': only texts that occur verbatim in the row's passage: the first answers
        of the other questions on the same passage (same lang and context), then other
        first answers of the language found in the passage, then spans of the passage;
        all three of the kind of the row's first answer, the last two also of its length
        (`choose_passage_distractors`);
      * 'other_answers': the first answers of the other questions on the same passage,
        then first answers of other items of the same language and the same kind (numeric
        or text, as the row's first answer), then of the other kind (`choose_distractors`).
    Each group is taken in keyed random order. A candidate overlapping any gold answer of
    the item, or a distractor already chosen, is rejected. options = [first answer] +
    distractors, shuffled; gold_option is the index of the first answer;
    distractor_sources gives the source ('answer', 'span', 'other_passage') of each
    distractor in the order they appear in options; distractors_in_passage is true when
    every distractor occurs verbatim in the passage. exemplar_id is a same-language item
    (among those built) with a different context, or null.

    Rows that cannot get n_distractors distractors are dropped and reported under
    'too_few_distractors' (with up to 5 example ids). The result follows ITEM_SCHEMA,
    ordered by item_id; the report also has 'n_input', 'n_items', 'distractors' (the
    mode), 'distractor_sources' (distractors per source) and
    'n_items_distractors_in_passage'. Output for an item depends only on seed, mode, its
    own row and the candidate answers, not on row order.
    """
    if distractors not in DISTRACTOR_MODES:
        raise ValueError(f"distractors must be one of {DISTRACTOR_MODES}, got {distractors!r}")
    rows = df.sort("id").to_dicts()
    first_by_lang: dict[str, list[str]] = {}
    by_passage: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(rows):
        first_by_lang.setdefault(row["lang"], []).append(row["answers"][0])
        by_passage.setdefault((row["lang"], row["context"]), []).append(i)
    pools = {lang: AnswerPool(texts, lang) for lang, texts in first_by_lang.items()}
    passages: dict[tuple[str, str], PassageSpans] = {}

    built: list[dict] = []
    dropped: list[str] = []
    for i, row in enumerate(rows):
        lang, item_id = row["lang"], row["id"]
        key = item_key(seed, item_id)
        golds = [tuple(tokenize(a, lang)) for a in row["answers"]]
        numeric = is_numeric(row["answers"][0], lang)
        # Sorted so the same-passage candidates do not depend on row order.
        passage_texts = sorted(
            {rows[j]["answers"][0] for j in by_passage[(lang, row["context"])] if j != i}
        )
        if distractors == "passage":
            passage = passages.get((lang, row["context"]))
            if passage is None:
                passage = passages[(lang, row["context"])] = PassageSpans(row["context"], lang)
            chosen, sources = choose_passage_distractors(
                row["answers"][0],
                golds,
                passage_texts,
                passage,
                pools[lang],
                key,
                n_distractors,
                gold_texts=row["answers"],
            )
        else:
            chosen, sources = choose_distractors(
                golds, passage_texts, pools[lang], numeric, key, n_distractors, lang
            )
        if len(chosen) < n_distractors:
            dropped.append(item_id)
            continue
        order = list(range(n_distractors + 1))
        random.Random(key).shuffle(order)
        labelled = [(row["answers"][0], "gold")] + list(zip(chosen, sources, strict=True))
        shuffled = [labelled[k] for k in order]
        built.append(
            {
                "item_id": item_id,
                "lang": lang,
                "title": row["title"],
                "context": row["context"],
                "question": row["question"],
                "answers": row["answers"],
                "options": [text for text, _ in shuffled],
                "gold_option": order.index(0),
                "distractor_sources": [src for _, src in shuffled if src != "gold"],
                "distractors_in_passage": all(d in row["context"] for d in chosen),
                "exemplar_id": None,
                "answer_kind": "numeric" if numeric else "text",
                "seed": seed,
                "_key": key,
            }
        )

    _assign_exemplars(built)
    for item in built:
        del item["_key"]
    report = {
        "n_input": df.height,
        "distractors": distractors,
        "too_few_distractors": len(dropped),
        "examples": {"too_few_distractors": dropped[:_MAX_EXAMPLES]},
        "n_items": len(built),
        "distractor_sources": {
            src: sum(item["distractor_sources"].count(src) for item in built)
            for src in DISTRACTOR_SOURCES
        },
        "n_items_distractors_in_passage": sum(item["distractors_in_passage"] for item in built),
        "option_quality": option_quality_rows(built),
    }
    return pl.DataFrame(built, schema=ITEM_SCHEMA), report


OPTION_KINDS = {"digit": "number", "upper": "name", "other": "other"}


def option_quality_rows(items: list[dict]) -> list[dict]:
    """How answer-like an item table's options are: one row per (lang, source, kind) with the
    number of options and how many start or end with a function word of the language
    (`language.function_edge`). source: 'gold' (the gold option, for comparison) or the
    distractor's source ('answer', 'span', 'other_passage'); kind: 'number' (a decimal digit),
    'name' (starts with a capital), 'other' (`text_kind`)."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for item in items:
        lang = item["lang"]
        gold = item["options"][item["gold_option"]]
        labelled = [(gold, "gold")] + list(
            zip(
                [o for k, o in enumerate(item["options"]) if k != item["gold_option"]],
                item["distractor_sources"],
                strict=True,
            )
        )
        for text, source in labelled:
            c = counts.setdefault((lang, source, OPTION_KINDS[text_kind(text)]), [0, 0])
            c[0] += 1
            c[1] += int(language.function_edge(text, lang))
    return [
        {"lang": lang, "source": src, "kind": kind, "n_options": n, "n_function_edge": fe}
        for (lang, src, kind), (n, fe) in sorted(counts.items())
    ]


def _assign_exemplars(items: list[dict]) -> None:
    """Set each item's exemplar_id: the top keyed-rank same-language item with another context."""
    by_lang: dict[str, list[dict]] = {}
    for item in items:
        by_lang.setdefault(item["lang"], []).append(item)
    for group in by_lang.values():
        ids = [it["item_id"] for it in group]
        hashes = np.array([stable_u64("exemplar", x) for x in ids], dtype=np.uint64)
        contexts = {c: k for k, c in enumerate(sorted({it["context"] for it in group}))}
        codes = np.array([contexts[it["context"]] for it in group])
        for item in group:
            eligible = np.flatnonzero(codes != contexts[item["context"]])
            if len(eligible) == 0:
                continue
            best = eligible[keyed_rank(hashes[eligible], item["_key"])[0]]
            item["exemplar_id"] = ids[best]
