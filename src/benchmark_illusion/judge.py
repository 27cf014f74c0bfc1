"""Judge a generated answer against the gold answers of an extractive-QA item.

Pruned models produce degenerate output (the question repeated back, a stretch of the
passage copied out, long rambles) that games a naive "does the answer contain the gold
string" test. The definitions below are language-aware and reject those cases.

Normalisation (`normalize`)
    1. Unicode NFKC (full-width letters and digits become ASCII, ligatures split);
    2. casefold (so German "ß" matches "ss");
    3. remove every character whose Unicode category starts with "P" (all punctuation:
       ASCII, and e.g. "。", "，", "、", "،", "؟", "।", "¿", "«");
    4. turn zero-width space and BOM into spaces, collapse whitespace runs to one space,
       strip;
    5. only when lang is English ("en", or "en-..."/"en_..."): drop the whole words
       "a", "an" and "the".
    Combining marks (Devanagari vowel signs, Arabic harakat, ...) are kept.

Tokens (`tokenize`)
    The normalised text split on spaces; in addition every CJK ideograph, Hiragana,
    Katakana and Thai character is a token of its own, because these scripts are
    written without spaces between words. Digits are never split off: "1500" and
    "2008年" give the tokens ["1500"] and ["2008", "年"].

Only the first non-empty line of a prediction is judged (`first_line`), so
"Paris\\nLondon is ..." is judged as "Paris".

Per gold answer
    exact_match  the token sequences are equal (and not empty);
    f1           SQuAD bag-of-tokens F1 (0.0 when either side has no tokens);
    contains     the gold's token sequence occurs as a contiguous run of the
                 prediction's tokens. Token-boundary aware: "1500" does not contain
                 "5", "It is Paris" contains "Paris", "答案是北京" contains "北京".

`judge` against several golds: exact_match and f1 are the maximum over the golds,
contains is true if any gold is contained. Golds with no tokens are ignored.

too_long
    The prediction has more than  max_length_factor * G + max_length_slack  tokens,
    where G is the token count of the longest gold the prediction contains (or of the
    longest gold when it contains none). Defaults: 3 * G + 3.

echo (the prediction copies the question or the passage instead of answering)
    Q is the question's tokens. The prediction is an echo if any of:
    a. question copy: Q has at least 3 tokens and occurs as a contiguous run of the
       prediction's tokens ("What is the capital of France? Paris");
    b. question echo: a gold the prediction contains also occurs in the question, and
       the prediction is mostly question: at least 3 of its tokens, and at least 60% of
       them, occur in Q. Here containment may come from the copy alone (Q "Is Varrow
       bigger than Mellen?", gold "Varrow", prediction "Varrow bigger than Mellen").
       A declarative restatement whose answer is not in the question ("The capital of
       France is Paris") is an answer, not an echo;
    c. passage copy: the prediction has a contiguous run of more than
       max_length_factor * G + max_length_slack tokens that also occurs contiguously
       in the passage's tokens. A passage copy is always too_long as well; the flag
       tells a copied stretch apart from long free text.

correct = contains and not echo and not too_long. An empty prediction (no tokens on
its first non-empty line) is never correct and has every flag false and f1 0.0.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass

_EN_ARTICLES = frozenset({"a", "an", "the"})

# Invisible separators some corpora (notably Chinese and Thai web text) use between
# words; they are not whitespace to str.split but must not glue tokens together.
_INVISIBLE_SPACES = str.maketrans({"\u200b": " ", "\ufeff": " "})

# Echo thresholds (see the module docstring, rule b).
_ECHO_MIN_TOKENS = 3
_ECHO_SHARE = 0.6


def _is_english(lang: str) -> bool:
    return lang.lower().replace("_", "-").split("-")[0] == "en"


def _is_unspaced_char(ch: str) -> bool:
    """True for a character of a script written without spaces between words."""
    cp = ord(ch)
    return (
        0x0E00 <= cp <= 0x0E7F  # Thai
        or 0x3005 <= cp <= 0x3007  # 々 〆 〇 (ideographic iteration mark, closing mark, zero)
        or 0x3040 <= cp <= 0x30FF  # Hiragana, Katakana
        or 0x31F0 <= cp <= 0x31FF  # Katakana phonetic extensions
        or 0x3400 <= cp <= 0x4DBF  # CJK extension A
        or 0x4E00 <= cp <= 0x9FFF  # CJK unified ideographs
        or 0xF900 <= cp <= 0xFAFF  # CJK compatibility ideographs
        or 0x20000 <= cp <= 0x3FFFF  # CJK extensions B and later, supplement
    )


def normalize(text: str, lang: str) -> str:
    """Return `text` NFKC-normalised, casefolded, without punctuation, whitespace collapsed.

    English articles (a, an, the) are dropped as whole words only when `lang` is English.
    Combining marks are kept. The result has single spaces and no leading/trailing space.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    words = text.translate(_INVISIBLE_SPACES).split()
    if _is_english(lang):
        words = [w for w in words if w not in _EN_ARTICLES]
    return " ".join(words)


def tokenize(text: str, lang: str) -> list[str]:
    """Return the tokens of normalize(text, lang).

    Words are split on spaces; each CJK ideograph, Hiragana, Katakana and Thai character
    is additionally its own token. Digit runs are never split.
    """
    tokens: list[str] = []
    for word in normalize(text, lang).split():
        run: list[str] = []
        for ch in word:
            # Thai digits are in the Thai block; they must stay part of a digit run.
            if _is_unspaced_char(ch) and not ch.isdigit():
                if run:
                    tokens.append("".join(run))
                    run = []
                tokens.append(ch)
            else:
                run.append(ch)
        if run:
            tokens.append("".join(run))
    return tokens


def first_line(text: str) -> str:
    """Return the first line of `text` that is not blank, stripped ('' if there is none)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def find_token_runs(haystack: list[str], needle: list[str]) -> list[int]:
    """Return every start index at which `needle` occurs contiguously in `haystack`.

    An empty needle occurs nowhere.
    """
    n = len(needle)
    if n == 0 or n > len(haystack):
        return []
    first = needle[0]
    return [
        i
        for i in range(len(haystack) - n + 1)
        if haystack[i] == first and haystack[i : i + n] == needle
    ]


def contains_tokens(haystack: list[str], needle: list[str]) -> bool:
    """True when the non-empty token list `needle` is a contiguous run of `haystack`."""
    return bool(find_token_runs(haystack, needle))


def _f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return 0.0
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred)
    recall = common / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str, lang: str) -> bool:
    """True when prediction and gold have the same, non-empty token sequence."""
    pred = tokenize(prediction, lang)
    return bool(pred) and pred == tokenize(gold, lang)


def token_f1(prediction: str, gold: str, lang: str) -> float:
    """SQuAD bag-of-tokens F1 between prediction and gold; 0.0 if either has no tokens."""
    return _f1(tokenize(prediction, lang), tokenize(gold, lang))


def contains(prediction: str, gold: str, lang: str) -> bool:
    """True when the gold's tokens form a contiguous run of the prediction's tokens.

    Token-boundary aware: "1500" does not contain "5". A gold without tokens is never
    contained.
    """
    return contains_tokens(tokenize(prediction, lang), tokenize(gold, lang))


@dataclass(frozen=True)
class Judgement:
    """The verdict on one prediction; see the module docstring for each definition."""

    exact_match: bool
    f1: float
    contains: bool
    echo: bool
    too_long: bool
    correct: bool


_EMPTY = Judgement(exact_match=False, f1=0.0, contains=False, echo=False, too_long=False, correct=False)


def _question_echo(pred: list[str], contained: list[list[str]], question: list[str]) -> bool:
    """Rules a and b of the module docstring."""
    if len(question) >= _ECHO_MIN_TOKENS and contains_tokens(pred, question):
        return True
    if not any(contains_tokens(question, g) for g in contained):
        return False
    qset = set(question)
    copied = sum(1 for tok in pred if tok in qset)
    return copied >= _ECHO_MIN_TOKENS and copied >= _ECHO_SHARE * len(pred)


def _passage_copy(pred: list[str], passage: list[str], max_run: int) -> bool:
    """Rule c: the prediction shares a contiguous run of more than `max_run` tokens with the passage."""
    n = max_run + 1
    if len(pred) < n or len(passage) < n:
        return False
    # Only runs of exactly n tokens need checking: any longer shared run contains one.
    grams = {tuple(passage[i : i + n]) for i in range(len(passage) - n + 1)}
    return any(tuple(pred[i : i + n]) in grams for i in range(len(pred) - n + 1))


def judge(
    prediction: str,
    golds: list[str],
    lang: str,
    question: str = "",
    passage: str = "",
    max_length_factor: float = 3.0,
    max_length_slack: int = 3,
) -> Judgement:
    """Judge the first non-empty line of `prediction` against `golds`.

    Promises exactly the definitions of the module docstring: correct is
    contains and not echo and not too_long; an empty prediction, or one judged
    against golds that all have no tokens, gets the all-false Judgement with f1 0.0.
    """
    pred = tokenize(first_line(prediction), lang)
    gold_tokens = [toks for toks in (tokenize(g, lang) for g in golds) if toks]
    if not pred or not gold_tokens:
        return _EMPTY

    em = any(pred == g for g in gold_tokens)
    f1 = max(_f1(pred, g) for g in gold_tokens)
    contained = [g for g in gold_tokens if contains_tokens(pred, g)]
    # Measure length against the gold actually given, so a long gold does not
    # license a long answer that only contains a short gold.
    reference = max(contained or gold_tokens, key=len)
    max_tokens = max_length_factor * len(reference) + max_length_slack
    too_long = len(pred) > max_tokens

    echo = _question_echo(pred, contained, tokenize(question, lang))
    if not echo and too_long and passage:
        echo = _passage_copy(pred, tokenize(passage, lang), int(max_tokens))

    return Judgement(
        exact_match=em,
        f1=f1,
        contains=bool(contained),
        echo=echo,
        too_long=too_long,
        correct=bool(contained) and not echo and not too_long,
    )
