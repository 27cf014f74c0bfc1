"""Turn normalised raw QA rows into evaluation items with multiple-choice distractors.

Input rows have the columns id, lang, title, context, question, answers (list[str]) and
answer_starts (list[int]). `validate_rows` drops bad rows, counting every dropped row
under exactly one reason; `build_items` gives each valid row n distractors, a shuffled
option list and a 1-shot exemplar.

Determinism. Everything random about an item is derived from a 64-bit key hashed
(blake2b) from (seed, item id), never from Python's hash() or from row order:
  * candidate distractors are ranked by a keyed mix of the item key and a hash of the
    candidate's text, so their relative order for an item does not depend on which
    other candidates exist. Adding or removing items changes an item's distractors only
    if an added answer outranks one it had, or a removed answer was one of them;
  * the option order is a shuffle by random.Random(item key);
  * the exemplar is the same-language item with a different context whose id ranks
    first under the same keyed mix.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import polars as pl

from benchmark_illusion.judge import contains_tokens, normalize, tokenize

REASONS = ("empty_id", "duplicate_id", "empty_context", "empty_question", "empty_answer", "answer_not_in_passage")
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
    "exemplar_id": pl.String,
    "answer_kind": pl.String,
    "seed": pl.Int64,
}


# ---------------------------------------------------------------------------
# Validation


def _clean_answers(answers: list | None, starts: list | None, lang: str) -> tuple[list[str], list[int]]:
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
        answers, starts = _clean_answers(row.get("answers"), row.get("answer_starts"), row.get("lang") or "")
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
# Answer comparisons


# "Mostly digits": two thirds keeps "1887年" and "2008年8月" (Chinese/Japanese dates)
# numeric while "May 1887" and "42 km" stay text.
_NUMERIC_SHARE = 2 / 3


def _is_numeric_tokens(norm: str) -> bool:
    chars = norm.replace(" ", "")
    digits = sum(ch.isdigit() for ch in chars)
    return digits > 0 and digits >= _NUMERIC_SHARE * len(chars)


def is_numeric(answer: str, lang: str = "en") -> bool:
    """True when at least two thirds of the non-space characters of normalize(answer) are digits.

    Punctuation is removed first, so "3.5", "12,000" and "12 000" count; so do "1887",
    "1887年", "2008年8月" and "٤٢" (any Unicode decimal digit); "May 1887", "42 km" and
    "5 km" do not.
    """
    return _is_numeric_tokens(normalize(answer, lang))


def _overlap_tokens(a: tuple[str, ...] | list[str], b: tuple[str, ...] | list[str]) -> bool:
    a, b = list(a), list(b)
    return a == b or contains_tokens(a, b) or contains_tokens(b, a)


def overlaps(a: str, b: str, lang: str) -> bool:
    """True when a and b are equal after normalisation or either's tokens are a contiguous run of the other's.

    "Tesla" and "Tesla Electric Light & Manufacturing" overlap; "5" and "1500" do not.
    Two texts without tokens are equal and so overlap; one empty text overlaps nothing else.
    """
    return _overlap_tokens(tokenize(a, lang), tokenize(b, lang))


# ---------------------------------------------------------------------------
# Keyed randomness

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _stable_u64(*parts: str) -> int:
    """A 64-bit hash of the parts, identical across processes and Python versions."""
    data = "\x1f".join(parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _item_key(seed: int, item_id: str) -> int:
    return _stable_u64("item-key", str(seed), item_id)


def _keyed_rank(hashes: np.ndarray, key: int) -> np.ndarray:
    """Indices of `hashes` in a pseudo-random order determined by `key` alone per element.

    Each element's sort key depends only on its own hash and `key` (splitmix64
    finaliser of hash ^ key), so adding elements never reorders the others.
    """
    z = hashes ^ np.uint64(key)
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    z = z ^ (z >> np.uint64(31))
    return np.argsort(z, kind="stable")


class _Pool:
    """The unique first answers of one language, with their tokens, kind and hash."""

    def __init__(self, texts: list[str], lang: str):
        self.texts = sorted(set(texts))
        self.tokens = [tuple(tokenize(t, lang)) for t in self.texts]
        numeric = np.array([_is_numeric_tokens(" ".join(t)) for t in self.tokens], dtype=bool)
        self.hashes = np.array([_stable_u64("answer", t) for t in self.texts], dtype=np.uint64)
        self.by_kind = {True: np.flatnonzero(numeric), False: np.flatnonzero(~numeric)}


# ---------------------------------------------------------------------------
# Items


def _choose_distractors(
    golds: list[tuple[str, ...]],
    passage_texts: list[str],
    pool: _Pool,
    numeric: bool,
    key: int,
    n: int,
    lang: str,
) -> tuple[list[str], list[str]]:
    """Pick up to n distractors in source order same_passage, same_kind, other_kind.

    A candidate is rejected when it has no tokens, overlaps any gold, or overlaps a
    distractor already chosen. Returns (texts, sources).
    """
    chosen: list[str] = []
    chosen_tokens: list[tuple[str, ...]] = []
    sources: list[str] = []
    considered: set[str] = set()

    def consider(text: str, tokens: tuple[str, ...], source: str) -> None:
        if text in considered:
            return
        considered.add(text)
        if not tokens or any(_overlap_tokens(tokens, g) for g in golds):
            return
        if any(_overlap_tokens(tokens, c) for c in chosen_tokens):
            return
        chosen.append(text)
        chosen_tokens.append(tokens)
        sources.append(source)

    if passage_texts:
        hashes = np.array([_stable_u64("answer", t) for t in passage_texts], dtype=np.uint64)
        for i in _keyed_rank(hashes, key):
            if len(chosen) == n:
                break
            consider(passage_texts[i], tuple(tokenize(passage_texts[i], lang)), "same_passage")
    for kind, source in ((numeric, "same_kind"), (not numeric, "other_kind")):
        idx = pool.by_kind[kind]
        if len(chosen) == n or len(idx) == 0:
            continue
        for j in idx[_keyed_rank(pool.hashes[idx], key)]:
            if len(chosen) == n:
                break
            consider(pool.texts[j], pool.tokens[j], source)
    return chosen, sources


def build_items(df: pl.DataFrame, seed: int, n_distractors: int = 3) -> tuple[pl.DataFrame, dict]:
    """Build multiple-choice items from the good rows of `validate_rows`.

    For each row: n_distractors distractors, taken first from the first answers of the
    other questions on the same passage (same lang and context), then from first
    answers of other items of the same language and the same kind (numeric or text,
    as the row's first answer), then of the other kind; each group in keyed random
    order. A candidate overlapping any gold answer of the item, or a distractor already
    chosen, is rejected. options = [first answer] + distractors, shuffled;
    gold_option is the index of the first answer; distractor_sources gives the source
    of each distractor in the order they appear in options. exemplar_id is a
    same-language item (among those built) with a different context, or null.

    Rows that cannot get n_distractors distractors are dropped and reported under
    'too_few_distractors' (with up to 5 example ids). The result follows ITEM_SCHEMA,
    ordered by item_id; the report also has 'n_input' and 'n_items'. Output for an
    item depends only on seed, its own row and the candidate answers, not on row order.
    """
    rows = df.sort("id").to_dicts()
    first_by_lang: dict[str, list[str]] = {}
    by_passage: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(rows):
        first_by_lang.setdefault(row["lang"], []).append(row["answers"][0])
        by_passage.setdefault((row["lang"], row["context"]), []).append(i)
    pools = {lang: _Pool(texts, lang) for lang, texts in first_by_lang.items()}

    built: list[dict] = []
    dropped: list[str] = []
    for i, row in enumerate(rows):
        lang, item_id = row["lang"], row["id"]
        key = _item_key(seed, item_id)
        golds = [tuple(tokenize(a, lang)) for a in row["answers"]]
        numeric = is_numeric(row["answers"][0], lang)
        # Sorted so the same-passage candidates do not depend on row order.
        passage_texts = sorted({rows[j]["answers"][0] for j in by_passage[(lang, row["context"])] if j != i})
        distractors, sources = _choose_distractors(
            golds, passage_texts, pools[lang], numeric, key, n_distractors, lang
        )
        if len(distractors) < n_distractors:
            dropped.append(item_id)
            continue
        order = list(range(n_distractors + 1))
        random.Random(key).shuffle(order)
        labelled = [(row["answers"][0], "gold")] + list(zip(distractors, sources))
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
        "too_few_distractors": len(dropped),
        "examples": {"too_few_distractors": dropped[:_MAX_EXAMPLES]},
        "n_items": len(built),
    }
    return pl.DataFrame(built, schema=ITEM_SCHEMA), report


def _assign_exemplars(items: list[dict]) -> None:
    """Set each item's exemplar_id: the top keyed-rank same-language item with another context."""
    by_lang: dict[str, list[dict]] = {}
    for item in items:
        by_lang.setdefault(item["lang"], []).append(item)
    for group in by_lang.values():
        ids = [it["item_id"] for it in group]
        hashes = np.array([_stable_u64("exemplar", x) for x in ids], dtype=np.uint64)
        contexts = {c: k for k, c in enumerate(sorted({it["context"] for it in group}))}
        codes = np.array([contexts[it["context"]] for it in group])
        for item in group:
            eligible = np.flatnonzero(codes != contexts[item["context"]])
            if len(eligible) == 0:
                continue
            best = eligible[_keyed_rank(hashes[eligible], item["_key"])[0]]
            item["exemplar_id"] = ids[best]
