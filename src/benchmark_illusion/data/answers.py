"""Answer comparisons: whether an answer is a number, and whether two answers overlap after
normalisation (equal, or one's judge tokens a contiguous run of the other's)."""

from __future__ import annotations

from benchmark_illusion.textnorm import contains_tokens, normalize, tokenize

# "Mostly digits": two thirds keeps "1887年" and "2008年8月" (Chinese/Japanese dates)
# numeric while "May 1887" and "42 km" stay text.
_NUMERIC_SHARE = 2 / 3


def is_numeric_tokens(norm: str) -> bool:
    chars = norm.replace(" ", "")
    digits = sum(ch.isdigit() for ch in chars)
    return digits > 0 and digits >= _NUMERIC_SHARE * len(chars)


def is_numeric(answer: str, lang: str = "en") -> bool:
    """True when at least two thirds of the non-space characters of normalize(answer) are digits.

    Punctuation is removed first, so "3.5", "12,000" and "12 000" count; so do "1887",
    "1887年", "2008年8月" and "٤٢" (any Unicode decimal digit); "May 1887", "42 km" and
    "5 km" do not.
    """
    return is_numeric_tokens(normalize(answer, lang))


def overlap_tokens(a: tuple[str, ...] | list[str], b: tuple[str, ...] | list[str]) -> bool:
    a, b = list(a), list(b)
    return a == b or contains_tokens(a, b) or contains_tokens(b, a)


def overlaps(a: str, b: str, lang: str) -> bool:
    """True when a and b are equal after normalisation or either's tokens are a contiguous run
    of the other's.

    "Tesla" and "Tesla Electric Light & Manufacturing" overlap; "5" and "1500" do not.
    Two texts without tokens are equal and so overlap; one empty text overlaps nothing else.
    """
    return overlap_tokens(tokenize(a, lang), tokenize(b, lang))


def touch_tokens(a: tuple[str, ...] | list[str], b: tuple[str, ...] | list[str]) -> bool:
    """Whether a and b overlap after normalisation, or one ends with the other's start ("of
    grey" and "grey stone", "Bergführer Josef" and "Josef Anger"): a distractor that shares an
    edge with the gold is part of the gold's phrase, not another answer."""
    a, b = list(a), list(b)
    if overlap_tokens(a, b):
        return True
    return any(a[-k:] == b[:k] or b[-k:] == a[:k] for k in range(1, min(len(a), len(b))))
