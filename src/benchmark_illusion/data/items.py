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
    gold's kind (number / capitalised / other, `_kind`), so no option stands out as the
    only number or the only name; the last two also only of the gold's length
    (`_length_range`; see `_Passage` and `_choose_passage_distractors`);
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

import functools
import hashlib
import math
import random
import unicodedata

import numpy as np
import polars as pl

from benchmark_illusion.evaluation.judge import contains_tokens, normalize, tokenize

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
    """True when a and b are equal after normalisation or either's tokens are a contiguous run
    of the other's.

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


def _keyed_mix(hashes: np.ndarray, key: int) -> np.ndarray:
    """Each element's sort key: the splitmix64 finaliser of hash ^ key."""
    z = hashes ^ np.uint64(key)
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _keyed_rank(hashes: np.ndarray, key: int) -> np.ndarray:
    """Indices of `hashes` in a pseudo-random order determined by `key` alone per element.

    Each element's sort key depends only on its own hash and `key` (splitmix64
    finaliser of hash ^ key), so adding elements never reorders the others.
    """
    return np.argsort(_keyed_mix(hashes, key), kind="stable")


class _Pool:
    """The unique first answers of one language, with their tokens, kind and hash."""

    def __init__(self, texts: list[str], lang: str):
        self.texts = sorted(set(texts))
        self.tokens = [tuple(tokenize(t, lang)) for t in self.texts]
        numeric = np.array([_is_numeric_tokens(" ".join(t)) for t in self.tokens], dtype=bool)
        self.hashes = np.array([_stable_u64("answer", t) for t in self.texts], dtype=np.uint64)
        self.by_kind = {True: np.flatnonzero(numeric), False: np.flatnonzero(~numeric)}
        # 'passage' mode: the span kind of each text (digit / upper / other).
        self.span_kinds = [_kind(t) for t in self.texts]


# ---------------------------------------------------------------------------
# Items


class _Picked:
    """The distractors chosen so far, and the rule both modes share for the next candidate:
    a text is considered once, and rejected when it has no tokens, overlaps a gold or a chosen
    distractor (`_overlap_tokens`), or fails the mode's extra check `also` (called last, so it
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
        if not tokens or any(_overlap_tokens(tokens, t) for t in self.golds + self._tokens):
            return
        if self.also is not None and not self.also(text):
            return
        self.texts.append(text)
        self._tokens.append(tokens)
        self.sources.append(source)


def _choose_distractors(
    golds: list[tuple[str, ...]],
    passage_texts: list[str],
    pool: _Pool,
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
        hashes = np.array([_stable_u64("answer", t) for t in passage_texts], dtype=np.uint64)
        for i in _keyed_rank(hashes, key):
            if len(chosen) == n:
                break
            consider(passage_texts[i], tuple(tokenize(passage_texts[i], lang)), "answer")
    for kind in (numeric, not numeric):  # the same kind first
        idx = pool.by_kind[kind]
        if len(chosen) == n or len(idx) == 0:
            continue
        for j in idx[_keyed_rank(pool.hashes[idx], key)]:
            if len(chosen) == n:
                break
            consider(pool.texts[j], pool.tokens[j], "other_passage")
    return chosen, sources


# ---------------------------------------------------------------------------
# Passage spans ('passage' mode)
#
# Sentences. A passage is cut into sentences after 。！？ । ؟ ۔ (always), at line breaks,
# and after . ! ? followed (past closing quotes and brackets) by whitespace or the end,
# except: a "." after an abbreviation (a single letter as in "J. Smith", a word with an
# inner period as in "U.S." or "z.B.", or a short list of common abbreviations such as
# "Dr", "St", "etc", "Nr") and any of the three followed by a lower-case letter. "3.5" has
# no whitespace after its period and stays whole. Simplifications: an abbreviation that
# really ends a sentence ("... in the U.S. Then") does not split, and a German ordinal
# ("am 3. Oktober") does; neither matters much, because spans also stop at punctuation.
#
# Units. Within a sentence the units are its whitespace-separated words with their leading
# and trailing punctuation trimmed off (a trailing "%" or "‰" stays, and so does the
# period of an abbreviation). In a word that contains characters the judge makes tokens of
# their own (CJK ideographs, kana, Thai: probed through judge.tokenize), each such
# character is a unit (with any combining marks that follow it), and so is each run of
# other characters ("2008年8月" -> 2008, 年, 8, 月). A span is a contiguous run of units
# whose text (from the first unit's start to the last unit's end) is cut verbatim out of
# the passage. Spans never cross punctuation between units (a trimmed comma, quote or
# bracket, a stand-alone "&" or dash; punctuation between two digits, as in "3.5" or
# "12,000", is part of its unit) nor a space between two such characters (Thai separates
# phrases with spaces), so option texts have no unbalanced brackets or dangling commas.
# Thai vowel signs written before their consonant can still end up split from it: a span
# is cut at characters, not at syllables.
#
# Kind. 'digit' (contains a decimal digit of any script, `_kind`), 'upper' (starts with an
# upper-case letter: only cased scripts have those), 'other'. Among 'upper' spans, name-like
# ones are preferred: those that also end with a capitalised word ("Sorr River",
# "University of Chicago"; not "Elbrin is") and, when they start a sentence, whose first
# word is also capitalised somewhere in the passage where it does not start a sentence
# (the capital is then not just the sentence start's: not "The lake"). The others are used
# only after them.
# A span never ends with a word that has no judge tokens (an English article).

_SENTENCE_END = frozenset("。！？।؟۔")
_SENTENCE_END_IF_SPACED = frozenset(".!?")
_CLOSING = frozenset("\"'”’»)]}」』）】")
_KEEP_PUNCT = frozenset("%‰‱")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc no nr ca approx inc ltd co corp gen col lt mt ft fig vol pp "
    "bzw usw vgl sra srta dra dña".split()
)
# Candidate spans are enumerated by the sum of their units' token counts, and kept by the
# exact count of their text; the slack covers a normalisation that joins words.
_LENGTH_SLACK = 2


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P") and ch not in _KEEP_PUNCT


@functools.lru_cache(maxsize=65536)
def _own_token(ch: str, lang: str) -> bool:
    """True when the judge makes `ch` a token of its own (CJK ideographs, kana, Thai)."""
    if ch.isascii() or ch.isspace():
        return False
    return len(tokenize(f"x{ch}x", lang)) == 3


def _is_abbreviation(text: str, dot: int) -> bool:
    """True when the "." at text[dot] ends an abbreviation rather than a sentence."""
    start = dot
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:dot]
    while word and _is_punct(word[0]):
        word = word[1:]
    if not word:
        return False
    if len(word) == 1 and word.isalpha():
        return True
    if "." in word and not any(ch.isdigit() for ch in word):
        return True
    return word.casefold() in _ABBREVIATIONS


def split_sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the sentences of `text`, blank ones left out (rules above)."""
    out: list[tuple[int, int]] = []
    start, i, n = 0, 0, len(text)

    def close(end: int) -> None:
        if text[start:end].strip():
            out.append((start, end))

    while i < n:
        ch = text[i]
        if ch == "\n":
            close(i)
            start = i + 1
        elif ch in _SENTENCE_END:
            close(i + 1)
            start = i + 1
        elif ch in _SENTENCE_END_IF_SPACED:
            j = i + 1
            while j < n and text[j] in _CLOSING:
                j += 1
            if j == n or text[j].isspace():
                k = j
                while k < n and text[k].isspace() and text[k] != "\n":
                    k += 1
                lower_next = k < n and text[k].islower()
                if not lower_next and not (ch == "." and _is_abbreviation(text, i)):
                    close(j)
                    start = i = j
                    continue
        i += 1
    close(n)
    return out


def _kind(text: str) -> str:
    """'digit' (contains a decimal digit of any script: 0-9, ٠-٩, ०-९, ๐-๙, ０-９, ...),
    'upper' (its first letter or digit is an upper-case letter), else 'other'.

    Superscripts and circled digits ("km²", a footnote mark "¹", "①") are not decimal
    digits, so they make nothing a number; nor do number words or CJK numerals ("three",
    "三次"), in any script alike."""
    if any(ch.isdecimal() for ch in text):
        return "digit"
    first = next((ch for ch in text if ch.isalnum()), "")
    return "upper" if first.isupper() or first.istitle() else "other"


def _length_range(n_tokens: int) -> tuple[int, int]:
    """Token counts allowed for a distractor of a gold with n_tokens tokens: the integers
    from n/2 up to 3n/2 (at least one)."""
    lo = max(1, math.ceil(n_tokens / 2))
    return lo, max(lo, (3 * n_tokens) // 2)


class _Passage:
    """One passage cut into phrases of units (see above), with cached spans and occurrences."""

    def __init__(self, text: str, lang: str):
        self.text, self.lang = text, lang
        self.tokens = tokenize(text, lang)
        # Each phrase: the (start, end) offsets of a run of units a span may join.
        self.phrases: list[list[tuple[int, int]]] = []
        sentence_starts: set[int] = set()
        for s, e in split_sentences(text):
            first = len(self.phrases)
            self._cut(s, e)
            for phrase in self.phrases[first:]:
                if phrase:
                    sentence_starts.add(phrase[0][0])
                    break
        self.phrases = [p for p in self.phrases if p]
        self.sentence_starts = sentence_starts
        self.capitalised = {
            text[a:b]
            for p in self.phrases
            for a, b in p
            if a not in sentence_starts and _kind(text[a:b]) == "upper"
        }
        self.unit_counts = [[len(tokenize(text[a:b], lang)) for a, b in p] for p in self.phrases]
        self._spans: dict[tuple[int, int, int], tuple[str, tuple[str, ...], str | None, int]] = {}
        self._occurrences: dict[str, list[tuple[int, int]]] = {}
        self.answers: list[int] | None = None  # pool indices of answers found in the passage

    def _cut(self, start: int, end: int) -> None:
        """Append the phrases of text[start:end] to self.phrases."""
        text, lang = self.text, self.lang
        phrase: list[tuple[int, int]] = []
        self.phrases.append(phrase)

        def brk() -> None:
            nonlocal phrase
            if phrase:
                phrase = []
                self.phrases.append(phrase)

        i, prev_end = start, None
        while i < end:
            if text[i].isspace():
                i += 1
                continue
            j = i
            while j < end and not text[j].isspace():
                j += 1
            # A space between two characters of a script without spaces separates phrases.
            if (
                prev_end is not None
                and _own_token(text[i], lang)
                and _own_token(text[prev_end - 1], lang)
            ):
                brk()
            if any(_own_token(ch, lang) for ch in text[i:j]):
                run = None
                for k in range(i, j):
                    ch = text[k]
                    if _is_punct(ch) and not (
                        run is not None
                        and k + 1 < j
                        and text[k - 1].isdigit()
                        and text[k + 1].isdigit()
                    ):
                        if run is not None:
                            phrase.append((run, k))
                            run = None
                        brk()
                    elif (
                        unicodedata.category(ch).startswith("M")
                        and run is None
                        and phrase
                        and phrase[-1][1] == k
                    ):
                        phrase[-1] = (phrase[-1][0], k + 1)
                    elif _own_token(ch, lang):
                        if run is not None:
                            phrase.append((run, k))
                            run = None
                        phrase.append((k, k + 1))
                    elif run is None:
                        run = k
                if run is not None:
                    phrase.append((run, j))
            else:
                a, b = i, j
                while a < b and _is_punct(text[a]):
                    a += 1
                while b > a and _is_punct(text[b - 1]):
                    if (
                        text[b - 1] == "."
                        and b == j
                        and _is_abbreviation(text, b - 1)
                        and b - 1 > a
                    ):
                        break
                    b -= 1
                if a > i:
                    brk()
                if a < b:
                    phrase.append((a, b))
                if b < j or a == b:
                    brk()
            prev_end = j
            i = j

    def spans(self, lo: int, hi: int, kind: str) -> list[tuple[str, tuple[str, ...], bool]]:
        """(text, tokens, weak) of the distinct spans of `kind` with lo..hi judge tokens, in
        passage order; weak: an 'upper' span that is not name-like (see above)."""
        out: list[tuple[str, tuple[str, ...], bool]] = []
        seen: set[str] = set()
        for p, (phrase, counts) in enumerate(zip(self.phrases, self.unit_counts, strict=True)):
            for i in range(len(phrase)):
                total = 0
                for j in range(i, len(phrase)):
                    total += counts[j]
                    if total > hi + _LENGTH_SLACK:
                        break
                    # Never end on a word without judge tokens ("in the" is "in" to the judge).
                    if total < lo - _LENGTH_SLACK or counts[j] == 0:
                        continue
                    text, tokens, span_kind, weak = self._span(p, i, j)
                    if span_kind == kind and lo <= len(tokens) <= hi and text not in seen:
                        seen.add(text)
                        out.append((text, tokens, weak))
        return out

    def _span(self, p: int, i: int, j: int) -> tuple[str, tuple[str, ...], str, bool]:
        key = (p, i, j)
        hit = self._spans.get(key)
        if hit is None:
            phrase = self.phrases[p]
            text = self.text[phrase[i][0] : phrase[j][1]]
            tokens = tuple(tokenize(text, self.lang))
            kind, weak = _kind(text), False
            if kind == "upper":
                first = self.text[phrase[i][0] : phrase[i][1]]
                last = self.text[phrase[j][0] : phrase[j][1]]
                sentence_capital = (
                    phrase[i][0] in self.sentence_starts and first not in self.capitalised
                )
                weak = _kind(last) != "upper" or sentence_capital
            hit = self._spans[key] = (text, tokens, kind, weak)
        return hit

    def occurrences(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of every occurrence of `text` in the passage."""
        hit = self._occurrences.get(text)
        if hit is None:
            hit, k = [], self.text.find(text)
            while k >= 0 and text:
                hit.append((k, k + len(text)))
                k = self.text.find(text, k + 1)
            self._occurrences[text] = hit
        return hit


def _choose_passage_distractors(
    gold: str,
    golds: list[tuple[str, ...]],
    passage_texts: list[str],
    passage: _Passage,
    pool: _Pool,
    key: int,
    n: int,
) -> tuple[list[str], list[str]]:
    """'passage' mode: up to n distractors that occur verbatim in the passage.

    Every source keeps only candidates of the gold's kind (`_kind`), so that no option
    differs from the others by being a number, a name or neither, which a question's
    wording often gives away. In order: (1) `passage_texts` (the first answers of the
    other questions on this passage), keyed random order; (2) first answers of other
    questions of the language that occur in this passage (verbatim and as a run of its
    judge tokens) and (3) spans of the passage (`_Passage`), both also only with between
    half and one and a half times the gold's judge-token count (`_length_range`), ordered
    by the distance of their token count from the gold's, shorter before longer at the
    same distance, then keyed random order (spans: name-like 'upper' spans before the
    others, see `_Passage`, then that order). (1) has no length window: those answers are
    answer-shaped phrases chosen by annotators, their length is no cue (on XQuAD a
    "longest" or "shortest option" guess is right about a quarter of the time), and a
    window would replace many of them with spans, which are weaker distractors; the
    window is what makes an enumerated span or a found answer answer-sized. A candidate
    is rejected when it has no tokens, does not occur in the passage, is equal to,
    contains or is contained in any gold or chosen distractor after normalisation
    (`_overlap_tokens`), or shares characters of the passage with a chosen distractor
    (any occurrence of either). Returns (texts, sources): 'answer'
    for (1) and (2), 'span' for (3).
    """
    n_gold = len(tokenize(gold, passage.lang))
    lo, hi = _length_range(n_gold)
    kind = _kind(gold)
    used: list[tuple[int, int]] = []

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
        hashes = np.array([_stable_u64("answer", t) for t in passage_texts], dtype=np.uint64)
        for i in _keyed_rank(hashes, key):
            if len(chosen) == n:
                return chosen, sources
            text = passage_texts[i]
            # Of the gold's kind, as (2) and (3), but of any length: see the docstring.
            if _kind(text) == kind:
                consider(text, tuple(tokenize(text, passage.lang)), "answer")

    if len(chosen) < n:
        if passage.answers is None:
            passage.answers = [
                j
                for j, t in enumerate(pool.texts)
                if t in passage.text and contains_tokens(passage.tokens, list(pool.tokens[j]))
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
            hashes = np.array([_stable_u64("answer", t) for t, _, _ in spans], dtype=np.uint64)
            for k in ordered(
                [len(toks) for _, toks, _ in spans], hashes, [weak for _, _, weak in spans]
            ):
                if len(chosen) == n:
                    break
                consider(spans[k][0], spans[k][1], "span")
    return chosen, sources


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
        (`_choose_passage_distractors`);
      * 'other_answers': the first answers of the other questions on the same passage,
        then first answers of other items of the same language and the same kind (numeric
        or text, as the row's first answer), then of the other kind (`_choose_distractors`).
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
    pools = {lang: _Pool(texts, lang) for lang, texts in first_by_lang.items()}
    passages: dict[tuple[str, str], _Passage] = {}

    built: list[dict] = []
    dropped: list[str] = []
    for i, row in enumerate(rows):
        lang, item_id = row["lang"], row["id"]
        key = _item_key(seed, item_id)
        golds = [tuple(tokenize(a, lang)) for a in row["answers"]]
        numeric = is_numeric(row["answers"][0], lang)
        # Sorted so the same-passage candidates do not depend on row order.
        passage_texts = sorted(
            {rows[j]["answers"][0] for j in by_passage[(lang, row["context"])] if j != i}
        )
        if distractors == "passage":
            passage = passages.get((lang, row["context"]))
            if passage is None:
                passage = passages[(lang, row["context"])] = _Passage(row["context"], lang)
            chosen, sources = _choose_passage_distractors(
                row["answers"][0], golds, passage_texts, passage, pools[lang], key, n_distractors
            )
        else:
            chosen, sources = _choose_distractors(
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
