"""Language resources of the judge and of the distractors: where a token sits in the answer's
text, negation and alternative cues, number words, light stemming, word breaks in scripts
written without spaces, and function words.

Each resource comes from a maintained package where one exists, pinned in pyproject.toml:

- function words: stopwords-iso lists (stopwordsiso), every language they list (57; no
  Telugu), without the number words they also hold;
- number words: num2words (en, es, de, ru, ar, vi, th, tr, fi, ro, id, ko, te, bn, fr, it, pt,
  nl, ...), and the tables below where it has none (el, hi, sw; Chinese and Japanese numerals
  are written here);
- stems of inflected words: snowballstemmer, for the languages of STEMMED, with the rules of
  `stems_match` beside it;
- word breaks: jieba (Chinese) and pythainlp's newmm (Thai);
- negation, alternative and doubt cues: written here, per language (NEGATION_BEFORE, ...).

Token positions (`located_tokens`). The judge compares the tokens of textnorm.py
(`tokenize`); its new rules need to know where each token stands in the original line: which
clause it is in (commas, semicolons, colons, sentence ends and dashes separate clauses; a
separator between two digits, as in "1,500" or "3.5", does not), whether it is written with a
capital, and whether it starts a sentence. `located_tokens` builds the same tokens character by
character and keeps each token's offsets; where that does not give exactly `tokenize`'s tokens
(a compatibility character that NFKC turns into several), it returns None and the rules that
need positions are skipped for that line.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import unicodedata
from dataclasses import dataclass

from benchmark_illusion.textnorm import (
    APOSTROPHES,
    FOLD,
    INVISIBLE,
    MINUS,
    SPACE_LIKE,
    is_english,
    is_greek,
    is_unspaced_char,
    normalize,
    starts_token,
    tokenize,
)


def base_lang(lang: str) -> str:
    """The language part of a code: "en" for "en", "en-GB", "EN_us"."""
    return lang.lower().replace("_", "-").split("-")[0]


# ---------------------------------------------------------------------------
# Tokens with their place in the line

# Characters that end a clause: a negation or an "or" on the other side of one does not
# bind the gold ("Paris, not Lyon": the "not" is Lyon's).
_CLAUSE_BREAK = frozenset(
    ",;:.!?\u2026"  # Latin, Cyrillic, ...
    "\u00b7\u0387"  # Greek ano teleia (a semicolon)
    "\u3002\uff0c\uff1b\uff1a\uff01\uff1f\u3001"  # CJK
    "\u060c\u061b\u061f\u06d4"  # Arabic
    "\u0964\u0965"  # Devanagari danda
    '\u2014\u2013()[]{}"\u201c\u201d\u00ab\u00bb'  # dashes, brackets, quotes
)
_DIGIT_SEPARATORS = frozenset(",.\u066b\u066c")
_SENTENCE_BREAK = frozenset(".!?\u2026\u3002\uff01\uff1f\u0964\u0965\u061f\u06d4")


@dataclass(frozen=True)
class Located:
    """One judge token of a line: its text, offsets in the line, clause and sentence numbers,
    whether its first letter is a capital, and whether it is the first token of a sentence."""

    text: str
    start: int
    end: int
    clause: int
    sentence: int
    capital: bool
    sentence_start: bool


def _char_norm(ch: str, prev: str, nxt: str) -> str:
    """What `normalize` makes of one character (before the English article rule)."""
    if ch in INVISIBLE:
        return ""
    if ch in MINUS:
        return "-" if nxt.isdecimal() and starts_token(prev) else ""
    if ch in APOSTROPHES or ch in SPACE_LIKE:
        return " "
    out = []
    text = unicodedata.normalize("NFC", unicodedata.normalize("NFKC", ch).casefold())
    if any(is_greek(c) for c in text):
        text = unicodedata.normalize(
            "NFC",
            "".join(c for c in unicodedata.normalize("NFD", text) if not unicodedata.combining(c)),
        )
    text = text.replace("i\u0307", "i")
    for c in text:
        if c.isdecimal():
            out.append(str(unicodedata.decimal(c)))
        elif unicodedata.category(c).startswith("P"):
            continue
        elif c.isspace():
            out.append(" ")
        else:
            out.append(FOLD.get(c, c))
    return "".join(out)


@functools.lru_cache(maxsize=8192)
def located_tokens(line: str, lang: str) -> tuple[Located, ...] | None:
    """The tokens of tokenize(line, lang), each with its place in `line` (module docstring);
    None when they cannot be placed exactly."""
    words: list[list[tuple[str, int, int]]] = []  # per word: (normalised char, start, end)
    word: list[tuple[str, int, int]] = []
    clause = sentence = 0
    breaks: list[tuple[int, int, int]] = []  # (offset, clause, sentence) at each word start
    at_char: dict[int, tuple[int, int]] = {}  # offset -> (clause, sentence)
    prev = ""
    n = len(line)
    for i, ch in enumerate(line):
        nxt = line[i + 1] if i + 1 < n else ""
        if ch in _CLAUSE_BREAK and not (
            ch in _DIGIT_SEPARATORS and prev.isdecimal() and nxt.isdecimal()
        ):
            clause += 1
            if ch in _SENTENCE_BREAK:
                sentence += 1
        norm = _char_norm(ch, prev, nxt)
        at_char[i] = (clause, sentence)
        if ch not in INVISIBLE:
            prev = ch
        for c in norm:
            if c == " ":
                if word:
                    words.append(word)
                    word = []
            else:
                if not word:
                    breaks.append((i, clause, sentence))
                word.append((c, i, i + 1))
    if word:
        words.append(word)
    if len(breaks) != len(words):
        return None
    out: list[Located] = []
    last_sentence = -1
    english = is_english(lang)
    for w in words:
        text = "".join(c for c, _, _ in w)
        if english and text in ("a", "an", "the"):
            continue
        # split characters of scripts without spaces into tokens of their own, digits kept whole
        runs: list[list[tuple[str, int, int]]] = []
        run: list[tuple[str, int, int]] = []
        for item in w:
            if is_unspaced_char(item[0]) and not item[0].isdigit():
                if run:
                    runs.append(run)
                    run = []
                runs.append([item])
            else:
                run.append(item)
        if run:
            runs.append(run)
        for r in runs:
            start, end = r[0][1], r[-1][2]
            first = line[start]
            # a run of a script without spaces holds clauses of its own ("北京，上海")
            w_clause, w_sentence = at_char[start]
            out.append(
                Located(
                    text="".join(c for c, _, _ in r),
                    start=start,
                    end=end,
                    clause=w_clause,
                    sentence=w_sentence,
                    capital=first.isupper() or first.istitle(),
                    sentence_start=w_sentence != last_sentence,
                )
            )
            last_sentence = w_sentence
    if [t.text for t in out] != tokenize(line, lang):
        return None
    return tuple(out)


# ---------------------------------------------------------------------------
# Function words (stopwords-iso)


# Normalised as in any language but English, whose articles `normalize` drops: here "the" is
# a word like any other (a span may not start with it).
_NO_ARTICLES = "und"


@functools.lru_cache(maxsize=64)
def function_words(lang: str) -> frozenset[str]:
    """The language's function words (stopwords-iso) as judge tokens: each entry normalised
    and kept only when it is a single token of letters (no digits, no punctuation: the lists
    also hold "10", "'ll" and CJK punctuation). Empty for a language the lists lack."""
    import stopwordsiso

    code = base_lang(lang)
    if not stopwordsiso.has_lang(code):
        return frozenset()
    out = set()
    # the lists also hold number words ("tres", "zwei"): a number is an answer, not a
    # function word
    numbers = {" ".join(toks) for toks, _ in number_lexicon(lang)}
    for w in stopwordsiso.stopwords(code):
        norm = normalize(w, _NO_ARTICLES)
        # one word of letters (in Chinese and Thai a word of several characters)
        if norm and " " not in norm and _wordlike(norm) and norm not in numbers:
            out.add(norm)
    return frozenset(out)


def _wordlike(token: str) -> bool:
    """Letters and combining marks only (Devanagari vowel signs are marks, not letters)."""
    return bool(token) and all(
        c.isalpha() or unicodedata.category(c).startswith("M") for c in token
    )


def is_function_word(token: str, lang: str) -> bool:
    """Whether a judge token is one of the language's function words."""
    return token in function_words(lang)


def words_of(text: str, lang: str) -> list[str]:
    """The normalised words of `text`: the judge's tokens (English articles kept), except in
    Chinese and Thai, where the word segmenter joins characters into words."""
    breaks = word_breaks(text, lang)
    if breaks is None:
        return tokenize(text, _NO_ARTICLES)
    cuts = sorted(breaks)
    out = [normalize(text[a:b], _NO_ARTICLES) for a, b in zip(cuts, cuts[1:], strict=False)]
    return [w for w in out if w]


def function_edge(text: str, lang: str) -> bool:
    """Whether `text` starts or ends with a function word of its language ("of grey", "opened
    in", "Este árbol crece" ends well but "and" is one): no such phrase is an answer."""
    words = words_of(text, lang)
    fw = function_words(lang)
    return bool(words) and (words[0] in fw or words[-1] in fw)


# ---------------------------------------------------------------------------
# Word breaks in scripts without spaces


@functools.lru_cache(maxsize=4096)
def word_breaks(text: str, lang: str) -> frozenset[int] | None:
    """Character offsets of `text` where a word starts or ends, by the language's word
    segmenter (jieba for Chinese, pythainlp's newmm for Thai); None for other languages."""
    code = base_lang(lang)
    if code == "zh":
        import jieba

        jieba.setLogLevel(logging.WARNING)
        words = list(jieba.cut(text, HMM=False))
    elif code == "th":
        from pythainlp.tokenize import word_tokenize

        words = word_tokenize(text, engine="newmm", keep_whitespace=True)
    else:
        return None
    out, at = {0}, 0
    for w in words:
        at += len(w)
        out.add(at)
    return frozenset(out)


# ---------------------------------------------------------------------------
# Negation and alternatives

# Cues written as the judge normalises them (lower case, no punctuation, Greek without
# accents). NEGATION_BEFORE: a cue that stands in the gold's clause, at most NEGATION_WINDOW
# tokens before it ("It is not Paris", "Это не Москва", "不是北京"); NEGATION_AFTER: a cue right
# after the gold, at most 2 tokens away in the same clause ("Paris is not ...", "Ankara değil",
# "दिल्ली नहीं है"). In Chinese and Thai tokens are characters, so the window counts characters.
NEGATION_BEFORE: dict[str, tuple[str, ...]] = {
    "en": (
        "not",
        "no",
        "never",
        "nor",
        "isn t",
        "wasn t",
        "aren t",
        "weren t",
        "doesn t",
        "didn t",
        "don t",
        "neither",
        "cannot",
        "can t",
        "rather than",
        "instead of",
    ),
    "de": (
        "nicht",
        "kein",
        "keine",
        "keinen",
        "keinem",
        "keiner",
        "nie",
        "niemals",
        "weder",
        "statt",
        "anstatt",
    ),
    "es": ("no", "ni", "nunca", "jamás", "tampoco", "en lugar de", "en vez de"),
    "fr": ("ne", "n", "pas", "jamais", "ni", "non"),
    "ro": ("nu", "nici", "niciodată", "nicidecum"),
    "ru": ("не", "нет", "ни", "никогда", "вместо"),
    "el": ("δεν", "δε", "οχι", "μην", "μη", "ουτε", "αντι"),
    "tr": ("değil", "hayır"),
    "fi": ("ei", "eikä", "en", "et", "emme", "ette", "eivät", "eli ei"),
    "ar": ("ليس", "ليست", "لست", "ليسوا", "لا", "لم", "لن", "غير", "ليسا", "بدلا من"),
    "hi": ("नहीं", "न", "मत", "ना"),
    "bn": ("না", "নয়", "নেই", "নি"),
    "vi": ("không", "chẳng", "chả", "chưa", "không phải"),
    "id": ("bukan", "tidak", "tak", "belum"),
    "sw": ("si", "hapana", "sio", "siyo"),
    "zh": ("不", "没", "沒", "非", "未", "无", "無", "别"),
    "th": ("ไม่", "มิ", "มิใช่"),
    "ko": ("아니", "안", "않"),
    "ja": ("ない", "ではない", "じゃない"),
}
# Languages that put the negation after what it denies; for the others only a copula with a
# negation right after the gold counts ("Paris is not the capital").
NEGATION_AFTER: dict[str, tuple[str, ...]] = {
    "en": ("is not", "isn t", "was not", "wasn t", "are not", "aren t", "were not", "weren t"),
    "de": ("ist nicht", "ist kein", "ist keine", "war nicht", "sind nicht", "nicht"),
    "es": ("no es", "no era", "no fue", "no son"),
    "fr": ("n est pas", "n était pas", "pas"),
    "ro": ("nu este", "nu e", "nu a fost"),
    "ru": ("не", "не является", "нет"),
    "el": ("δεν ειναι", "δεν ηταν", "οχι"),
    "tr": ("değil", "değildir", "değildi", "olmayan", "yok"),
    "fi": ("ei ole", "ei", "eikä"),
    "ar": ("ليس", "ليست", "لا"),
    "hi": ("नहीं", "नही", "न"),
    "bn": ("না", "নয়", "নেই"),
    "vi": ("không phải",),
    "id": ("bukan", "tidak"),
    "zh": ("不是", "并不", "並不"),
    "th": ("ไม่ใช่",),
    "ko": ("아니", "아닙니다", "아니다", "아니에요"),
    "ja": ("ではない", "じゃない", "ではありません"),
}
NEGATION_WINDOW = 6
# Cues that deny the gold only when they end its clause right after it ("Santiago no.",
# "Paris, nicht Lyon" is Lyon's): "Madrid no es ..." is NEGATION_AFTER's.
NEGATION_FINAL: dict[str, tuple[str, ...]] = {
    "en": ("not",),
    "es": ("no",),
    "de": ("nicht",),
    "fr": ("pas", "non"),
    "ro": ("nu",),
    "vi": ("không",),
    "id": ("bukan",),
}
# Turkish negates the verb with -ma/-me before the tense ending: "Ayşe Demir yazmadı"
_TR_NEGATIVE_VERB = (
    "madi",
    "medi",
    "miyor",
    "muyor",
    "mez",
    "maz",
    "mamis",
    "memis",
    "mayacak",
    "meyecek",
    "madir",
    "medir",
)
# "or" and its equivalents: the gold offered next to something else that is no option makes
# the answer `uncertain` ("Paris or Lyon", "Berlin oder München", "北京或上海").
ALTERNATIVE: dict[str, tuple[str, ...]] = {
    "en": ("or",),
    "de": ("oder", "beziehungsweise", "bzw"),
    "es": ("o", "u"),
    "fr": ("ou",),
    "ro": ("sau", "ori"),
    "ru": ("или", "либо"),
    "el": ("η", "ειτε"),
    "tr": ("veya", "ya da", "yahut", "yoksa"),
    "fi": ("tai", "vai"),
    "ar": ("أو", "او", "أم"),
    "hi": ("या", "अथवा", "वा"),
    "bn": ("বা", "অথবা", "কিংবা"),
    "vi": ("hoặc", "hay", "hoặc là"),
    "id": ("atau",),
    "sw": ("au", "ama"),
    "zh": ("或", "或者", "还是", "還是", "或是"),
    "th": ("หรือ",),
    "ko": ("또는", "혹은", "아니면"),
    "ja": ("または", "か", "あるいは", "もしくは"),
}


@functools.lru_cache(maxsize=256)
def _cue_tokens(lang: str, table_name: str) -> tuple[tuple[str, ...], ...]:
    table = {
        "before": NEGATION_BEFORE,
        "after": NEGATION_AFTER,
        "or": ALTERNATIVE,
        "doubt": DOUBT,
        "final": NEGATION_FINAL,
    }[table_name]
    cues = table.get(base_lang(lang), ())
    out = {tuple(tokenize(c, lang)) for c in cues}
    return tuple(sorted((c for c in out if c), key=len, reverse=True))


def _unspaced(lang: str) -> bool:
    return base_lang(lang) in ("zh", "th", "ja", "lo", "km", "my")


def _clause_ok(toks: tuple[Located, ...] | None, a: int, b: int) -> bool:
    """Tokens a..b-1 of the line are in one clause (always true without positions)."""
    if toks is None or a >= b:
        return True
    return toks[a].clause == toks[b - 1].clause


def _cue_at(pred: list[str], at: int, cues) -> int:
    """Length of the longest cue starting at pred[at], else 0."""
    for cue in cues:
        if tuple(pred[at : at + len(cue)]) == cue:
            return len(cue)
    return 0


def negated_at(
    pred: list[str], toks: tuple[Located, ...] | None, start: int, end: int, lang: str
) -> bool:
    """Whether the gold's occurrence pred[start:end] is denied by a negation cue in its clause
    (NEGATION_BEFORE within NEGATION_WINDOW tokens before it, NEGATION_AFTER right after it,
    NEGATION_FINAL right after it at the end of its clause; in Turkish a negative verb after
    it)."""
    window = NEGATION_WINDOW * (2 if _unspaced(lang) else 1)
    final = _cue_tokens(lang, "final")
    if final and end < len(pred):
        n = _cue_at(pred, end, final)
        line_end = end + n == len(pred)  # "Santiago, no.": the answer's last word
        clause_end = (
            toks is not None and end + n < len(pred) and toks[end + n].clause != toks[end].clause
        )
        if n and (line_end or (clause_end and _clause_ok(toks, start, end + n))):
            return True
    if base_lang(lang) == "tr":
        for at in range(end, min(len(pred), end + 4)):
            if (
                pred[at].endswith(_TR_NEGATIVE_VERB)
                and len(pred[at]) > 5
                and _clause_ok(toks, start, at + 1)
            ):
                return True
    for cues, after in ((_cue_tokens(lang, "before"), False), (_cue_tokens(lang, "after"), True)):
        if not cues:
            continue
        if after:
            span = range(end, min(len(pred), end + (4 if _unspaced(lang) else 2)))
        else:
            span = range(max(0, start - window - 2), start)
        for at in span:
            n = _cue_at(pred, at, cues)
            if not n:
                continue
            if after:
                if _clause_ok(toks, start, at + n):
                    return True
            elif at + n <= start and start - (at + n) <= window and _clause_ok(toks, at, end):
                return True
    return False


def alternative_at(
    pred: list[str],
    toks: tuple[Located, ...] | None,
    start: int,
    end: int,
    lang: str,
    named: list[tuple[int, int]],
    line: str = "",
) -> bool:
    """Whether the gold's occurrence pred[start:end] is offered as one of alternatives, in its
    clause: an "or" cue (ALTERNATIVE) right after it with more words behind ("Paris or Lyon"),
    or right before it with words in front ("Lyon or Paris"), where those words are not an
    occurrence of a phrase in `named` (the golds' and the options' occurrences: naming another
    option is the hedge rule's, not this one's); or a doubt cue (DOUBT) right before it ("maybe
    Paris")."""
    unspaced = _unspaced(lang)
    gap = 2 if unspaced else 1
    covered = {i for a, b in named for i in range(a, b)}

    def cue(at: int, cues) -> int:
        n = _cue_at(pred, at, cues)
        # Greek "ή" (or) and the article "η" are one token once accents are dropped
        if n and base_lang(lang) == "el" and pred[at] == "η" and toks is not None and line:
            n = n if line[toks[at].start : toks[at].end].casefold() == "ή" else 0
        return n

    alternatives = _cue_tokens(lang, "or")
    # after the gold, in its clause or starting the next: "Paris or Lyon", "Paris, or maybe
    # Lyon", "沈允之，也可能是沈周"
    for at in range(end, min(len(pred), end + gap + 1)):
        for cues in (alternatives, _cue_tokens(lang, "doubt")):
            n = cue(at, cues)
            if n and at + n < len(pred) and at + n not in covered:
                if _clause_ok(toks, at, at + n + 1):
                    return True
    for at in range(max(0, start - gap - 4), start):
        for cues, needs_front in ((alternatives, True), (_cue_tokens(lang, "doubt"), False)):
            n = cue(at, cues)
            if not n or at + n > start or start - (at + n) > gap or not _clause_ok(toks, at, end):
                continue
            if not needs_front:
                return True
            if at > 0 and at - 1 not in covered and _clause_ok(toks, at - 1, at + 1):
                return True
    return False


# Cues that mark doubt by themselves, without a second alternative ("maybe Paris").
DOUBT: dict[str, tuple[str, ...]] = {
    "en": ("maybe", "perhaps", "possibly", "probably"),
    "de": ("vielleicht", "wahrscheinlich", "möglicherweise"),
    "es": ("quizás", "quizá", "tal vez", "posiblemente", "probablemente"),
    "fr": ("peut être", "probablement"),
    "ro": ("poate", "probabil"),
    "ru": ("возможно", "может быть", "наверное", "вероятно"),
    "el": ("ισως", "μαλλον", "πιθανως"),
    "tr": ("belki", "muhtemelen"),
    "fi": ("ehkä", "luultavasti", "mahdollisesti"),
    "ar": ("ربما", "قد يكون", "لعل"),
    "hi": ("शायद", "संभवतः"),
    "bn": ("হয়তো", "সম্ভবত"),
    "vi": ("có lẽ", "có thể là"),
    "id": ("mungkin",),
    "sw": ("labda",),
    "zh": ("也许", "也許", "可能是", "或许", "或許", "大概"),
    "th": ("อาจจะเป็น", "อาจเป็น", "อาจจะ"),
    "ko": ("아마",),
    "ja": ("たぶん", "多分", "おそらく"),
}


# ---------------------------------------------------------------------------
# Numbers

# Number words where num2words has none: 0-20, the tens, 100 and 1000 (and the compositional
# rule of each language for 21-99 below).
_UNITS = {
    "el": "μηδέν ένα δύο τρία τέσσερα πέντε έξι επτά οκτώ εννέα δέκα έντεκα δώδεκα δεκατρία "
    "δεκατέσσερα δεκαπέντε δεκαέξι δεκαεπτά δεκαοκτώ δεκαεννέα είκοσι",
    "hi": "शून्य एक दो तीन चार पाँच छह सात आठ नौ दस ग्यारह बारह तेरह चौदह पंद्रह सोलह सत्रह "
    "अठारह उन्नीस बीस",
    "sw": "sifuri moja mbili tatu nne tano sita saba nane tisa kumi",
}
_TENS = {
    "el": {
        30: "τριάντα",
        40: "σαράντα",
        50: "πενήντα",
        60: "εξήντα",
        70: "εβδομήντα",
        80: "ογδόντα",
        90: "ενενήντα",
        100: "εκατό",
        1000: "χίλια",
    },
    "hi": {
        30: "तीस",
        40: "चालीस",
        50: "पचास",
        60: "साठ",
        70: "सत्तर",
        80: "अस्सी",
        90: "नब्बे",
        100: "सौ",
        1000: "हज़ार",
    },
    "sw": {
        20: "ishirini",
        30: "thelathini",
        40: "arobaini",
        50: "hamsini",
        60: "sitini",
        70: "sabini",
        80: "themanini",
        90: "tisini",
        100: "mia moja",
        1000: "elfu moja",
    },
}
# Extra spellings a reader accepts: "hundert" beside "einhundert", "hundred" beside "one
# hundred", Greek "εφτά"/"οχτώ", Hindi "पांच"/"छः", "हजार".
_EXTRA = {
    "en": {100: ("hundred",), 1000: ("thousand",)},
    "de": {100: ("hundert",), 1000: ("tausend",)},
    "el": {7: ("εφτά",), 8: ("οχτώ",), 9: ("εννιά",)},
    "hi": {5: ("पांच",), 6: ("छः", "छे"), 1000: ("हजार",)},
    "ru": {1000: ("тысяча",)},
    "vi": {1000: ("một ngàn", "ngàn"), 100: ("trăm",)},
    "ro": {1: ("una",), 2: ("două",), 12: ("douăsprezece",), 100: ("sută",), 1000: ("mie",)},
    "es": {1: ("uno", "una"), 100: ("ciento",)},
    # Arabic numbers agree in gender with what they count
    "ar": {2: ("اثنتان", "اثنين"), 12: ("اثنتا عشرة", "اثني عشر", "اثنتي عشرة")},
}
_ZH_DIGITS = "零一二三四五六七八九"


def _zh_number(n: int) -> str:
    """Chinese numerals for 0 <= n <= 99999 in the usual short form (十二, 二十, 一百零五)."""
    if n < 10:
        return _ZH_DIGITS[n]
    if n < 20:
        return "十" + (_ZH_DIGITS[n - 10] if n > 10 else "")
    out, zero = "", False
    for value, unit in ((10000, "万"), (1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d = n // value % 10
        if d:
            if zero and out:
                out += "零"
            out += _ZH_DIGITS[d] + unit
            zero = False
        else:
            zero = bool(out)
    return out


def _table_words(code: str, n: int) -> list[str]:
    units = _UNITS[code].split()
    tens = _TENS[code]
    if n < len(units):
        return [units[n]]
    if n in tens:
        return [tens[n]]
    if code == "el" and 20 < n < 100 and n % 10:
        ten = units[20] if n < 30 else tens[n - n % 10]
        return [f"{ten} {units[n % 10]}"]
    if code == "sw" and 10 < n < 100:
        ten = units[10] if n < 20 else tens[n - n % 10]
        return [f"{ten} na {units[n % 10]}"] if n % 10 else [ten]
    return []


@functools.lru_cache(maxsize=65536)
def number_words(n: int, lang: str) -> tuple[str, ...]:
    """The ways `lang` writes the cardinal n in words (empty when none is known): num2words,
    the tables above, Chinese and Japanese numerals."""
    code = base_lang(lang)
    out: list[str] = []
    if code in ("zh", "ja"):
        if 0 <= n <= 99999:
            out.append(_zh_number(n))
            if 10 <= n < 20:
                out.append("一" + _zh_number(n))
            if code == "zh" and n == 2:
                out.append("两")
    elif code in _UNITS:
        out += _table_words(code, n)
    else:
        from num2words import num2words

        try:
            out.append(num2words(n, lang=code))
        except (NotImplementedError, KeyError, ValueError, OverflowError, TypeError):
            pass
        if code == "tr" and 10 < n < 100 and n % 10 and out:
            # num2words writes "oniki"; Turkish writes tens and units apart: "on iki"
            out.append(f"{num2words(n - n % 10, lang='tr')} {num2words(n % 10, lang='tr')}")
    out += _EXTRA.get(code, {}).get(n, ())
    return tuple(dict.fromkeys(w for w in out if w))


_WORD_RANGE = tuple(range(0, 101)) + (1000, 10000, 100000, 1000000)


@functools.lru_cache(maxsize=64)
def number_lexicon(lang: str) -> tuple[tuple[tuple[str, ...], int], ...]:
    """(tokens, value) of every number word of 0-100 and the round ones (1000, 10 000,
    100 000, 1 000 000) in `lang`, longest first."""
    out = {}
    for n in _WORD_RANGE:
        for w in number_words(n, lang):
            toks = tuple(tokenize(w, lang))
            if toks:
                out.setdefault(toks, n)
    return tuple(sorted(out.items(), key=lambda kv: -len(kv[0])))


_DIGITS = re.compile(r"^-?\d+$")


_ZH_VALUE = {c: i for i, c in enumerate(_ZH_DIGITS)} | {"两": 2, "〇": 0}
_ZH_UNIT = {"十": 10, "百": 100, "千": 1000, "万": 10000}


def _zh_value(chars: list[str]) -> int | None:
    """The value of a run of Chinese numerals (十二, 一百零五, 两千), None if it is none."""
    if not chars or any(c not in _ZH_VALUE and c not in _ZH_UNIT for c in chars):
        return None
    total, digit = 0, None
    for c in chars:
        if c in _ZH_VALUE:
            digit = _ZH_VALUE[c]
        else:
            unit = _ZH_UNIT[c]
            total += (1 if digit is None else digit) * unit
            digit = None
    return total + (digit or 0)


def number_variants(gold_tokens: list[str], lang: str) -> list[list[str]]:
    """Other token sequences of the same answer with its numbers written the other way: a
    digit token (up to 1 000 000) as the language's words ("12" -> "twelve", "doce", "十二"),
    a run of number words as digits ("doce" -> "12", "十二" -> "12")."""
    out: list[list[str]] = []
    for i, tok in enumerate(gold_tokens):
        if _DIGITS.match(tok) and len(tok.lstrip("-")) <= 7:
            n = int(tok)
            if 0 <= n <= 1_000_000:
                for w in number_words(n, lang):
                    out.append(gold_tokens[:i] + tokenize(w, lang) + gold_tokens[i + 1 :])
    if base_lang(lang) in ("zh", "ja"):
        # a whole run of numerals, any value: 一百零五 -> 105
        i = 0
        while i < len(gold_tokens):
            j = i
            while j < len(gold_tokens) and _zh_value([gold_tokens[j]]) is not None:
                j += 1
            if j - i > 1:
                value = _zh_value(gold_tokens[i:j])
                if value is not None:
                    out.append(gold_tokens[:i] + [str(value)] + gold_tokens[j:])
            i = max(j, i + 1)
    lexicon = number_lexicon(lang)
    i = 0
    while i < len(gold_tokens):
        for toks, n in lexicon:
            if tuple(gold_tokens[i : i + len(toks)]) == toks:
                out.append(gold_tokens[:i] + [str(n)] + gold_tokens[i + len(toks) :])
                i += len(toks) - 1
                break
        i += 1
    seen, unique = {tuple(gold_tokens)}, []
    for v in out:
        if tuple(v) not in seen:
            seen.add(tuple(v))
            unique.append(v)
    return unique


# ---------------------------------------------------------------------------
# Light stemming

# Languages whose answers the judge also matches stem by stem (snowball), because they inflect
# names and nouns for case or attach clitics: "В Москве" answers "Москва", "بالقاهرة" answers
# "القاهرة", "Helsingissä" answers "Helsinki"; Spanish for number and gender ("carpinteros" for
# "carpintero"). English and the others match exactly.
STEMMED = {
    "es": "spanish",
    "ru": "russian",
    "tr": "turkish",
    "ar": "arabic",
    "fi": "finnish",
    "el": "greek",
    "de": "german",
    "ro": "romanian",
    "hi": "hindi",
    "id": "indonesian",
}
# A stem this short matches too many words to stand for an answer.
MIN_STEM = 3


@functools.lru_cache(maxsize=32)
def _stemmer(code: str):
    import snowballstemmer

    return snowballstemmer.stemmer(STEMMED[code])


@functools.lru_cache(maxsize=65536)
def stem(token: str, lang: str) -> str:
    """The snowball stem of a judge token in a STEMMED language (else the token itself)."""
    code = base_lang(lang)
    if code not in STEMMED or not _wordlike(token):
        return token
    s = _stemmer(code).stemWord(token)
    return s if len(s) >= MIN_STEM else token


def stems_match(pred_tok: str, gold_tok: str, lang: str) -> bool:
    """An inflected form of the gold token in a STEMMED language: the gold's snowball stem (at
    least MIN_STEM letters) starts the predicted token, both stems are equal, and neither word
    adds more than a case ending to it; or both share all but the gold's last letter (at least
    4 letters) and the prediction adds at most 4 ("Москва" / "Москве", "двенадцать" /
    "двенадцати"). Language rules besides: Arabic proclitics (و ف ب ك ل, with or without the
    article: "بالقاهرة", "والقاهرة", "للقاهرة"), Turkish case endings and the copula
    ("Ankaradır"), Finnish consonant gradation and -nen/-sen ("Helsingissä", "Turussa",
    "Virtasen"), the Hindi oblique ("आगरे" for "आगरा")."""
    if pred_tok == gold_tok:
        return True
    code = base_lang(lang)
    if code not in STEMMED or not (_wordlike(pred_tok) and _wordlike(gold_tok)):
        return False
    if code == "ar":
        return _arabic_match(pred_tok, gold_tok)
    if code == "tr" and pred_tok.startswith(gold_tok):
        # Turkish case endings and the copula, written onto the name ("Ankaradır", "Ankara'da"
        # is split by the apostrophe already); up to two stacked
        rest = pred_tok[len(gold_tok) :]
        if rest in _TR_ENDINGS or any(
            rest.startswith(e) and rest[len(e) :] in _TR_ENDINGS for e in _TR_ENDINGS
        ):
            return True
    if code == "hi" and gold_tok.endswith("\u093e") and len(gold_tok) >= 3:
        # the oblique of a masculine noun in -ā: आगरा -> आगरे (से), आगरों
        if pred_tok in (gold_tok[:-1] + "\u0947", gold_tok[:-1] + "\u094b\u0902"):
            return True
    if code == "fi":
        shared = len(os.path.commonprefix([pred_tok, gold_tok]))
        # consonant gradation (Helsinki -> Helsingissä, Turku -> Turussa) and -nen -> -se-
        # (Virtanen -> Virtasen): all but the gold's last letters (at least MIN_STEM), then at
        # most two letters of the changed stem and a case ending ("Kemijärvi" is another name)
        if shared >= max(MIN_STEM, len(gold_tok) - 3) and (
            len(gold_tok) - shared <= 2 or gold_tok.endswith("nen")
        ):
            rest = pred_tok[shared:]
            if any(rest[k:] in _FI_ENDINGS for k in range(0, min(3, len(rest) + 1))):
                return True
    g = stem(gold_tok, lang)
    if (
        len(g) >= MIN_STEM
        and stem(pred_tok, lang) == g
        and pred_tok.startswith(g)
        and len(pred_tok) - len(g) <= 5
        and len(gold_tok) - len(g) <= 3
    ):
        return True
    shared = len(os.path.commonprefix([pred_tok, gold_tok]))
    if code == "de":
        # German inflects names only in the genitive: "Deutschlands" (not "Lübecker Bucht")
        return shared == len(gold_tok) and pred_tok[shared:] in ("s", "es")
    if code == "tr":
        return False  # its endings are listed above ("Demirci" is another name)
    return shared >= max(4, len(gold_tok) - 1) and len(pred_tok) - shared <= 2


_AR_PROCLITICS = ("وال", "فال", "بال", "كال", "لل", "و", "ف", "ب", "ك", "ل")


def _arabic_match(pred_tok: str, gold_tok: str) -> bool:
    """The Arabic gold with proclitics (و ف ب ك ل) and the article ال in front, or with another
    case ending (snowball's stem)."""

    def bare(t: str) -> str:
        return t[2:] if t.startswith("ال") and len(t) > 4 else t

    g = bare(gold_tok)
    cands = {pred_tok} | {
        pred_tok[len(c) :]
        for c in _AR_PROCLITICS
        if pred_tok.startswith(c) and len(pred_tok) > len(c) + 2
    }
    for c in cands:
        c = bare(c)
        if c == g or (c.startswith(g) and c[len(g) :] in _AR_SUFFIXES):
            return True
    return False


# Arabic pronoun suffixes and the tā' marbūṭa a name or noun may take ("سليمان" is another name)
_AR_SUFFIXES = frozenset("ة ه ها هم هما ي ك كم نا".split())


# Turkish case, possessive and copula endings in every vowel-harmony form, as the judge
# normalises them (dotless ı read as i): Ankara-da, -dan, -ya, -nın, -dır, -ki, ...
_TR_ENDINGS = frozenset(
    "da de ta te dan den tan ten a e ya ye i yi u yu ü yü in nin un nun ün nün ca ce ça çe "
    "dir dur dür tir tur tür dik ydi ydu ymis la le yla yle ki lar ler si su sü".split()
)


# Finnish case endings (nominative to comitative), as the judge normalises them
_FI_ENDINGS = frozenset(
    "n a ä ta tä ssa ssä sta stä lla llä lta ltä lle na nä ksi in iin hin seen sen ten tta ttä "
    "ine ineen ssaan ssään staan stään llaan llään".split()
)


def strip_tones(token: str) -> str:
    """A Vietnamese token without its tone and vowel marks (and đ as d): "hà nội" -> "ha noi"."""
    decomposed = unicodedata.normalize("NFD", token.replace("đ", "d"))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def is_toneless(tokens: list[str]) -> bool:
    """Whether a Vietnamese answer is written without any tone or vowel mark."""
    return all(strip_tones(t) == t for t in tokens)


__all__ = [
    "ALTERNATIVE",
    "DOUBT",
    "NEGATION_AFTER",
    "NEGATION_BEFORE",
    "Located",
    "NEGATION_FINAL",
    "alternative_at",
    "base_lang",
    "function_edge",
    "function_words",
    "is_function_word",
    "is_toneless",
    "located_tokens",
    "negated_at",
    "normalize",
    "number_variants",
    "number_words",
    "stem",
    "stems_match",
    "strip_tones",
    "word_breaks",
    "words_of",
]
