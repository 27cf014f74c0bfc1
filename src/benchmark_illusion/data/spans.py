"""Passage spans, the candidates of 'passage'-mode distractors: a passage cut into sentences
and units, the kind of a text (number / capitalised / other), the token-length window around a
gold, and the spans of a passage with their occurrences."""

from __future__ import annotations

import functools
import math
import unicodedata

from benchmark_illusion import language
from benchmark_illusion.textnorm import is_unspaced_char, tokenize

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
# their own (CJK ideographs, kana, Thai: probed through text.tokenize), each such
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
# Kind. 'digit' (contains a decimal digit of any script, `text_kind`), 'upper' (starts with an
# upper-case letter: only cased scripts have those), 'other'. Among 'upper' spans, name-like
# ones are preferred: those that also end with a capitalised word ("Sorr River",
# "University of Chicago"; not "Elbrin is") and, when they start a sentence, whose first
# word is also capitalised somewhere in the passage where it does not start a sentence
# (the capital is then not just the sentence start's: not "The lake"). The others are used
# only after them.
# A span never ends with a word that has no judge tokens (an English article).
#
# Spans that are not answers are left out (`PassageSpans.spans`):
# - a span that starts or ends with a function word of the passage's language (stopwords-iso,
#   `language.function_edge`): "and", "of grey", "opened in", "Las semillas están";
# - in Chinese and Thai, a span cut inside a word of the word segmenter (jieba, pythainlp):
#   "京大" of "北京大学";
# - a capitalised span that is part of a longer name: the unit right before or after it in the
#   same phrase is capitalised too and no function word ("Bergführer Josef" of "Bergführer Josef
#   Anger"), unless that unit starts a sentence and is capitalised nowhere else;
# - a group of a number written with spaces between its groups ("000" of "12 000").

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


def _segmented(ch: str) -> bool:
    """A character of a script whose words the segmenter finds (not a digit, no punctuation)."""
    return is_unspaced_char(ch) and not ch.isdigit() and not _is_punct(ch)


def text_kind(text: str) -> str:
    """'digit' (contains a decimal digit of any script: 0-9, ٠-٩, ०-९, ๐-๙, ０-９, ...),
    'upper' (its first letter or digit is an upper-case letter), else 'other'.

    Superscripts and circled digits ("km²", a footnote mark "¹", "①") are not decimal
    digits, so they make nothing a number; nor do number words or CJK numerals ("three",
    "三次"), in any script alike."""
    if any(ch.isdecimal() for ch in text):
        return "digit"
    first = next((ch for ch in text if ch.isalnum()), "")
    return "upper" if first.isupper() or first.istitle() else "other"


def length_range(n_tokens: int) -> tuple[int, int]:
    """Token counts allowed for a distractor of a gold with n_tokens tokens: the integers
    from n/2 up to 3n/2 (at least one)."""
    lo = max(1, math.ceil(n_tokens / 2))
    return lo, max(lo, (3 * n_tokens) // 2)


class PassageSpans:
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
            if a not in sentence_starts and text_kind(text[a:b]) == "upper"
        }
        self.unit_counts = [[len(tokenize(text[a:b], lang)) for a, b in p] for p in self.phrases]
        self.breaks = language.word_breaks(text, lang)  # None outside Chinese and Thai
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
                    if (
                        span_kind == kind
                        and lo <= len(tokens) <= hi
                        and text not in seen
                        and self._answer_like(p, i, j, text, span_kind)
                    ):
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
            kind, weak = text_kind(text), False
            if kind == "upper":
                first = self.text[phrase[i][0] : phrase[i][1]]
                last = self.text[phrase[j][0] : phrase[j][1]]
                sentence_capital = (
                    phrase[i][0] in self.sentence_starts and first not in self.capitalised
                )
                weak = text_kind(last) != "upper" or sentence_capital
            hit = self._spans[key] = (text, tokens, kind, weak)
        return hit

    def _inside_word(self, at: int) -> bool:
        """Whether offset `at` cuts a word of the segmenter (Chinese and Thai only)."""
        t = self.text
        return (
            self.breaks is not None
            and 0 < at < len(t)
            and _segmented(t[at - 1])
            and _segmented(t[at])
            and at not in self.breaks
        )

    def on_word_breaks(self, text: str) -> bool:
        """Whether some occurrence of `text` starts and ends on word breaks (always true
        outside Chinese and Thai)."""
        return self.breaks is None or any(
            not self._inside_word(a) and not self._inside_word(b) for a, b in self.occurrences(text)
        )

    def _name_part(self, unit: tuple[int, int]) -> bool:
        """A unit that continues a name: capitalised, no function word, and not capitalised only
        because it starts a sentence."""
        text = self.text[unit[0] : unit[1]]
        if text_kind(text) != "upper":
            return False
        toks = tokenize(text, self.lang)
        if not toks or language.is_function_word(toks[0], self.lang):
            return False
        return unit[0] not in self.sentence_starts or text in self.capitalised

    def _answer_like(self, p: int, i: int, j: int, text: str, kind: str) -> bool:
        """The span phrase[i..j] is not cut inside a word, has no function word at either end,
        and (capitalised) is not part of a longer name (module comment above)."""
        phrase = self.phrases[p]
        if self._inside_word(phrase[i][0]) or self._inside_word(phrase[j][1]):
            return False
        if language.function_edge(text, self.lang):
            return False
        if kind == "upper":
            if i > 0 and self._name_part(phrase[i - 1]):
                return False
            if j + 1 < len(phrase) and self._name_part(phrase[j + 1]):
                return False
        if kind == "digit":
            # "000" of "12 000": a number's groups are one number
            if i > 0 and self._digits(phrase[i - 1]) and self._digits(phrase[i]):
                return False
            if j + 1 < len(phrase) and self._digits(phrase[j + 1]) and self._digits(phrase[j]):
                return False
        return True

    def _digits(self, unit: tuple[int, int]) -> bool:
        return self.text[unit[0] : unit[1]].isdecimal()

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
