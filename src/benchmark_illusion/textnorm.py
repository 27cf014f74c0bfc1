"""Script-aware text normalisation, tokenisation and token containment: the token sequences the
item builder (data/) and the answer judge (evaluation/) compare, by the same rules in every
language. A module of its own so that neither stage imports the other for it.

Normalisation (`normalize`)
    1. Unicode NFKC (full-width letters and digits become ASCII, ligatures split), then
       casefold (German "ß" matches "ss", Greek final "ς" matches "σ"), then NFC;
    2. script rules, the same for every `lang` (a gold in one script can turn up in any
       benchmark, and none of them merges two words of a language that keeps them apart):
       - Greek: every combining mark on a Greek letter is dropped (tonos, dialytika,
         polytonic marks), so "ΣΟΦΟΚΛΗΣ", "σοφοκλης" and "Σοφοκλής" are equal. Greek
         capitals are written without accents, so without this an upper-case answer
         never matches;
       - Turkish: casefold turns the dotted capital "İ" into "i" + U+0307 COMBINING DOT
         ABOVE; the dot is dropped, so "İstanbul" matches "istanbul". The dotless "ı" is
         mapped to "i" as well: casefold already maps the capital "I" to "i" in every
         language, so "ISPARTA", "Isparta" and "ısparta" could not be told apart anyway,
         and keeping "ı" apart would only make capitalisation variants (I/ı/İ/i) miss;
       - Romanian: the comma-below letters "ș" "ț" (U+0219, U+021B) are folded to the
         cedilla letters "ş" "ţ" (U+015F, U+0163), which older Romanian text and many
         models use for the same letters (Turkish "ş" is left as it is);
    3. every Unicode decimal digit becomes its ASCII digit (unicodedata.decimal): Arabic-
       Indic "١٩٧١", Extended Arabic-Indic "۱۹۷۱", Bengali "১৯৭১", Devanagari "१९७१", Thai
       "๑๙๗๑" and full-width "１９７１" all read "1971";
    4. a minus sign that starts a number is kept as "-": a hyphen-minus or U+2212 MINUS
       SIGN directly before a digit, at the start of the text, after whitespace or after
       an opening bracket or quote ("-5", "(−5)"), so "-5" does not match "5". Anywhere
       else both are punctuation ("1990-1995" reads "19901995", as before);
    5. apostrophes (U+0027 ', U+2018 ‘, U+2019 ’, U+02BC ʼ) become spaces: they split a
       word instead of gluing its parts. Turkish writes case suffixes after an apostrophe
       on proper names and numbers ("1850'den", "İstanbul'da"), and the passage copy must
       contain the gold "1850". Intended side effects: the English possessive "Newton's"
       contains the gold "Newton", French "l'Europe" contains "Europe";
    6. remove every other character whose Unicode category starts with "P" (all
       punctuation: ASCII, and e.g. "。", "，", "、", "،", "؟", "।", "¿", "«");
    7. zero-width space and BOM become spaces; invisible format characters (U+200E/U+200F
       direction marks, U+202A-U+202E, U+2066-U+2069, U+2060 word joiner, U+00AD soft
       hyphen) are removed; whitespace runs collapse to one space, the ends are stripped;
    8. only when lang is English ("en", or "en-..."/"en_..."): drop the whole words
       "a", "an" and "the".
    Other combining marks (Devanagari vowel signs, Arabic harakat, Vietnamese tones, ...)
    are kept.

Tokens (`tokenize`)
    The normalised text split on spaces; in addition every CJK ideograph, Hiragana,
    Katakana and Thai character is a token of its own, because these scripts are
    written without spaces between words. Digits are never split off: "1500" and
    "2008年" give the tokens ["1500"] and ["2008", "年"].
"""

from __future__ import annotations

import unicodedata

_EN_ARTICLES = frozenset({"a", "an", "the"})

# Invisible separators some corpora (notably Chinese and Thai web text) use between
# words; they are not whitespace to str.split but must not glue tokens together.
SPACE_LIKE = frozenset("\u200b\ufeff")
# Invisible format characters that carry no text: direction marks and embeddings,
# isolates, word joiner, soft hyphen. Removed without a trace.
INVISIBLE = frozenset(
    "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2060\u00ad"
)
# Apostrophes split words (Turkish suffixes: "1850'den"); see the module docstring, rule 5.
APOSTROPHES = frozenset("'\u2018\u2019\u02bc")
MINUS = frozenset("-\u2212")
# Single-character folds after casefold: Romanian comma-below to cedilla, Turkish dotless i.
FOLD = {"\u0219": "\u015f", "\u021b": "\u0163", "\u0131": "i"}


def is_english(lang: str) -> bool:
    return lang.lower().replace("_", "-").split("-")[0] == "en"


def is_unspaced_char(ch: str) -> bool:
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


def is_greek(ch: str) -> bool:
    return "\u0370" <= ch <= "\u03ff" or "\u1f00" <= ch <= "\u1fff"


def _strip_greek_marks(text: str) -> str:
    """Drop every combining mark that sits on a Greek letter (rule 2); the result is NFC."""
    out: list[str] = []
    on_greek = False
    for ch in unicodedata.normalize("NFD", text):
        if unicodedata.combining(ch):
            if on_greek:
                continue
        else:
            on_greek = is_greek(ch)
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def starts_token(prev: str) -> bool:
    """Whether a character after `prev` ('' at the start) begins a token, for the minus rule."""
    return (
        not prev
        or prev.isspace()
        or prev in SPACE_LIKE
        or unicodedata.category(prev) in ("Ps", "Pi")
    )


def normalize(text: str, lang: str) -> str:
    """Return `text` normalised as the module docstring's rules 1-8 say.

    NFKC, casefold, script rules (Greek marks, Turkish i, Romanian ş ţ), ASCII digits, a
    number's leading minus kept, apostrophes split words, no punctuation, invisible
    characters removed, whitespace collapsed; English articles (a, an, the) dropped as
    whole words only when `lang` is English. The result has single spaces and no
    leading/trailing space.
    """
    text = unicodedata.normalize("NFC", unicodedata.normalize("NFKC", text).casefold())
    if any(is_greek(ch) for ch in text):
        text = _strip_greek_marks(text)
    text = text.replace("i\u0307", "i")
    out: list[str] = []
    prev = ""
    n = len(text)
    for i, ch in enumerate(text):
        if ch in INVISIBLE:
            continue  # as if it were not there, also for the minus rule
        if ch in MINUS:
            if i + 1 < n and text[i + 1].isdecimal() and starts_token(prev):
                out.append("-")
        elif ch in APOSTROPHES or ch in SPACE_LIKE:
            out.append(" ")
        elif ch.isdecimal():
            out.append(str(unicodedata.decimal(ch)))
        elif not unicodedata.category(ch).startswith("P"):
            out.append(FOLD.get(ch, ch))
        prev = ch
    words = "".join(out).split()
    if is_english(lang):
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
            # Digits are ASCII after normalize; the check keeps any other numeral in its run.
            if is_unspaced_char(ch) and not ch.isdigit():
                if run:
                    tokens.append("".join(run))
                    run = []
                tokens.append(ch)
            else:
                run.append(ch)
        if run:
            tokens.append("".join(run))
    return tokens


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
