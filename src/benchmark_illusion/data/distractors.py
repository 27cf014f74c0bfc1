"""Keyed randomness and the choice of an item's multiple-choice distractors, in both modes
('passage' and 'other_answers'; see `benchmark_illusion.data.items`)."""

from __future__ import annotations

import hashlib

import numpy as np

from benchmark_illusion.data.answers import is_numeric_tokens, overlap_tokens, touch_tokens
from benchmark_illusion.data.spans import PassageSpans, length_range, text_kind
from benchmark_illusion.textnorm import contains_tokens, tokenize

# ---------------------------------------------------------------------------
# Keyed randomness

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def stable_u64(*parts: str) -> int:
    """A 64-bit hash of the parts, identical across processes and Python versions."""
    data = "\x1f".join(parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def item_key(seed: int, item_id: str) -> int:
    return stable_u64("item-key", str(seed), item_id)


def _keyed_mix(hashes: np.ndarray, key: int) -> np.ndarray:
    """Each element's sort key: the splitmix64 finaliser of hash ^ key."""
    z = hashes ^ np.uint64(key)
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def keyed_rank(hashes: np.ndarray, key: int) -> np.ndarray:
    """Indices of `hashes` in a pseudo-random order determined by `key` alone per element.

    Each element's sort key depends only on its own hash and `key` (splitmix64
    finaliser of hash ^ key), so adding elements never reorders the others.
    """
    return np.argsort(_keyed_mix(hashes, key), kind="stable")


class AnswerPool:
    """The unique first answers of one language, with their tokens, kind and hash."""

    def __init__(self, texts: list[str], lang: str):
        self.texts = sorted(set(texts))
        self.tokens = [tuple(tokenize(t, lang)) for t in self.texts]
        numeric = np.array([is_numeric_tokens(" ".join(t)) for t in self.tokens], dtype=bool)
        self.hashes = np.array([stable_u64("answer", t) for t in self.texts], dtype=np.uint64)
        self.by_kind = {True: np.flatnonzero(numeric), False: np.flatnonzero(~numeric)}
        # 'passage' mode: the span kind of each text (digit / upper / other).
        self.span_kinds = [text_kind(t) for t in self.texts]


# ---------------------------------------------------------------------------
# Distractor choice


class _Picked:
    """The distractors chosen so far, and the rule both modes share for the next candidate:
    a text is considered once, and rejected when it has no tokens, overlaps a chosen distractor
    (`overlap_tokens`), overlaps or touches a gold (`touch_tokens`: "of grey" beside the gold
    "grey stone"), or fails the mode's extra check `also` (called last, so it
    may record the accepted text)."""

    def __init__(self, golds: list[tuple[str, ...]], also=None):
        self.golds, self.also = golds, also
        self.texts: list[str] = []
        self.sources: list[str] = []
        self._tokens: list[tuple[str, ...]] = []
        self._seen: set[str] = set()

    def consider(self, text: str, tokens: tuple[str, ...], source: str) -> None:
        if text in self._seen:
            return
        self._seen.add(text)
        if not tokens or any(overlap_tokens(tokens, t) for t in self._tokens):
            return
        if any(touch_tokens(tokens, g) for g in self.golds):
            return
        if self.also is not None and not self.also(text):
            return
        self.texts.append(text)
        self._tokens.append(tokens)
        self.sources.append(source)


def choose_distractors(
    golds: list[tuple[str, ...]],
    passage_texts: list[str],
    pool: AnswerPool,
    numeric: bool,
    key: int,
    n: int,
    lang: str,
) -> tuple[list[str], list[str]]:
    """'other_answers' mode: up to n distractors, from the same passage, then answers of
    other passages of the same kind, then of the other kind.

    A candidate is rejected when it has no tokens, overlaps any gold, or overlaps a
    distractor already chosen. Returns (texts, sources); a source is 'answer' (same
    passage) or 'other_passage'.
    """
    picked = _Picked(golds)
    chosen, sources, consider = picked.texts, picked.sources, picked.consider

    if passage_texts:
        hashes = np.array([stable_u64("answer", t) for t in passage_texts], dtype=np.uint64)
        for i in keyed_rank(hashes, key):
            if len(chosen) == n:
                break
            consider(passage_texts[i], tuple(tokenize(passage_texts[i], lang)), "answer")
    for kind in (numeric, not numeric):  # the same kind first
        idx = pool.by_kind[kind]
        if len(chosen) == n or len(idx) == 0:
            continue
        for j in idx[keyed_rank(pool.hashes[idx], key)]:
            if len(chosen) == n:
                break
            consider(pool.texts[j], pool.tokens[j], "other_passage")
    return chosen, sources


def choose_passage_distractors(
    gold: str,
    golds: list[tuple[str, ...]],
    passage_texts: list[str],
    passage: PassageSpans,
    pool: AnswerPool,
    key: int,
    n: int,
    gold_texts: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """'passage' mode: up to n distractors that occur verbatim in the passage.

    Every source keeps only candidates of the gold's kind (`text_kind`), so that no option
    differs from the others by being a number, a name or neither, which a question's
    wording often gives away. In order: (1) `passage_texts` (the first answers of the
    other questions on this passage), keyed random order; (2) first answers of other
    questions of the language that occur in this passage (verbatim and as a run of its
    judge tokens) and (3) spans of the passage (`PassageSpans`), both also only with between
    half and one and a half times the gold's judge-token count (`length_range`), ordered
    by the distance of their token count from the gold's, shorter before longer at the
    same distance, then keyed random order (spans: name-like 'upper' spans before the
    others, see `PassageSpans`, then that order). (1) has no length window: those answers are
    answer-shaped phrases chosen by annotators, their length is no cue (on XQuAD a
    "longest" or "shortest option" guess is right about a quarter of the time), and a
    window would replace many of them with spans, which are weaker distractors; the
    window is what makes an enumerated span or a found answer answer-sized. A candidate
    is rejected when it has no tokens, does not occur in the passage, is equal to,
    contains or is contained in any gold or chosen distractor after normalisation
    (`overlap_tokens`), shares an edge with a gold ("of grey" beside "grey stone",
    `touch_tokens`), or shares characters of the passage with a gold (`gold_texts`, every
    answer of the item) or a chosen distractor (any occurrence of either). Spans (3) are also
    never cut inside a word, never start or end with a function word and are never a fragment
    of a longer name (`PassageSpans.spans`); answers found in the passage (2) are not cut inside a
    word either. Returns (texts, sources): 'answer'
    for (1) and (2), 'span' for (3).
    """
    n_gold = len(tokenize(gold, passage.lang))
    lo, hi = length_range(n_gold)
    kind = text_kind(gold)
    # the characters of every gold's occurrence: no distractor may share them
    used: list[tuple[int, int]] = [w for g in gold_texts or [gold] for w in passage.occurrences(g)]

    def apart(text: str) -> bool:
        """The text occurs in the passage, never on characters of a distractor already chosen."""
        where = passage.occurrences(text)
        if not where or any(a < d and c < b for a, b in where for c, d in used):
            return False
        used.extend(where)
        return True

    picked = _Picked(golds, apart)
    chosen, sources, consider = picked.texts, picked.sources, picked.consider

    def ordered(
        lengths: list[int], hashes: np.ndarray, weak: list[bool] | None = None
    ) -> np.ndarray:
        lengths_a = np.array(lengths, dtype=np.int64)
        keys = [_keyed_mix(hashes, key), lengths_a > n_gold, np.abs(lengths_a - n_gold)]
        if weak is not None:
            keys.append(np.array(weak, dtype=bool))
        return np.lexsort(keys)

    if passage_texts:
        hashes = np.array([stable_u64("answer", t) for t in passage_texts], dtype=np.uint64)
        for i in keyed_rank(hashes, key):
            if len(chosen) == n:
                return chosen, sources
            text = passage_texts[i]
            # Of the gold's kind, as (2) and (3), but of any length: see the docstring.
            if text_kind(text) == kind:
                consider(text, tuple(tokenize(text, passage.lang)), "answer")

    if len(chosen) < n:
        if passage.answers is None:
            passage.answers = [
                j
                for j, t in enumerate(pool.texts)
                if t in passage.text
                and contains_tokens(passage.tokens, list(pool.tokens[j]))
                and passage.on_word_breaks(t)
            ]
        found = [
            j
            for j in passage.answers
            if pool.span_kinds[j] == kind and lo <= len(pool.tokens[j]) <= hi
        ]
        if found:
            idx = np.array(found)
            for k in ordered([len(pool.tokens[j]) for j in found], pool.hashes[idx]):
                if len(chosen) == n:
                    break
                consider(pool.texts[found[k]], pool.tokens[found[k]], "answer")
    if len(chosen) < n:
        spans = passage.spans(lo, hi, kind)
        if spans:
            hashes = np.array([stable_u64("answer", t) for t, _, _ in spans], dtype=np.uint64)
            for k in ordered(
                [len(toks) for _, toks, _ in spans], hashes, [weak for _, _, weak in spans]
            ):
                if len(chosen) == n:
                    break
                consider(spans[k][0], spans[k][1], "span")
    return chosen, sources
