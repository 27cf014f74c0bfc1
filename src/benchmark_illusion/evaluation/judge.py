"""Judge a generated answer against the gold answers of an extractive-QA item.

Pruned models produce degenerate output (the question repeated back, a stretch of the
passage copied out, long rambles, every option listed, the gold said six times) that
games a naive "does the answer contain the gold string" test. The definitions below are
language-aware and reject those cases.

Texts are compared as tokens: `normalize` and `tokenize` (textnorm.py, whose module
docstring gives their rules) fold case, script variants, digits and punctuation the same
way in every language, and make each CJK, kana and Thai character a token of its own.

Only the first non-empty line of a prediction is judged (`first_line`), so
"Paris\\nLondon is ..." is judged as "Paris".

Per gold answer
    exact_match  the token sequences are equal (and not empty);
    f1           SQuAD bag-of-tokens F1 (0.0 when either side has no tokens);
    contains     a match of the gold (below) that stands as a whole entity and is
                 neither negated nor uncertain. Token-boundary aware: "1500" does not
                 contain "5", "It is Paris" contains "Paris", "答案是北京" contains "北京".

Matching a gold (`gold_matches`; the resources are in language.py)
    exact       the gold's tokens as a contiguous run of the prediction's tokens;
    number      the gold with its numbers written the other way: digits as the
                language's number words ("twelve", "doce", "十二") and number words as
                digits, 0-100 and the round ones (Chinese and Japanese numerals of any
                value up to 99 999);
    inflection  in a language of language.STEMMED, each token an inflected form of the
                gold's (`language.stems_match`: "В Москве", "بالقاهرة", "Ankaradır");
    toneless    Vietnamese and Romanian: the whole answer written without diacritics, the
                gold without them ("Ha Noi" for "Hà Nội").
    `match` says which (the first of these that found a clean match).

What the answer says (the `whole_entity`, language.negated_at and language.alternative_at
rules; `negated`, `uncertain`, `longer_entity`)
    whole entity  in a cased script (not German, whose nouns are all capitalised) a gold
                  written with a capital is not joined to a capitalised word of its clause,
                  directly or over a connector ("Paris Hilton", "New York" for York,
                  "Santiago de Compostela"); a capitalised word that only starts the sentence
                  counts where it starts names ("New", "San", "Lake"). In Chinese and Thai the
                  match starts and ends on the word segmenter's breaks ("北京大学" for 北京,
                  "ทองแดง" for ทอง), numbers with their classifier excepted ("十二个").
                  longer_entity: the gold's tokens occur, but only inside a longer entity;
    negated       a negation cue of the language in the gold's clause within
                  language.NEGATION_WINDOW tokens before it, a copula's negation right after
                  it, a final "no"/"not" ending its clause or the answer, a Turkish negative
                  verb after it ("It is not Paris", "Lyon, not Paris", "Ankara değil",
                  "Santiago, no."). Wrong under every verdict and bound;
    uncertain     an "or" of the language right after the gold (its clause or the next) with
                  words behind it that are no option and no gold, or right before it with
                  such words in front, or a doubt word right before or after it ("Paris or
                  Lyon", "maybe Paris", "沈允之，也可能是沈周"). Wrong in the verdicts (the lower
                  bound), right in correct_upper and correct_sentence_upper (the upper one).

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

Naming an option (used by hedge, options_named and the `candidates` format)
    A phrase (an option's or a gold's text) is named by the prediction when its tokens
    occur as a contiguous run of the prediction's tokens at a position that is not
    inside an occurrence of a longer phrase of the same set. So with the options "Tesla"
    and "Tesla Motors", the prediction "Tesla Motors" names only "Tesla Motors", and
    "Tesla and Tesla Motors" names both.

Restating the question is not naming
    When a prediction names two or more options, those whose text occurs in the question
    are not counted (unless that leaves none): a declarative answer restates the question's
    subject, and passage-span distractors can be exactly that subject. "The Pellan Bridge
    crosses the Sorr River" for "Which river does the Pellan Bridge cross?" names only
    "Sorr River", although "Pellan Bridge" is an option too.

hedge (the prediction offers the gold and something else)
    `judge` with `options`: the prediction contains a gold and also names an option that
    is not a gold ("1432 or 1427" with the options 1427 and 1432, gold 1427), also with its
    number written the other way or inflected ("Doce o tres", "وكريم النجار"). The phrase
    set is the options and the golds, so a distractor inside a named gold does not count,
    and neither does one whose every occurrence overlaps the gold as written (the passage
    span "of grey" in "made of grey stone", gold "grey stone"), nor an option that is a
    single function word of the language. In `candidates` such an overlap stays ambiguous:
    both options are named.

rivals (the false-recovery control)
    `judge(..., rivals=golds)` judges a distractor as if it were the gold: an occurrence of
    it that overlaps an occurrence of a rival (the item's real gold) is no match, so the
    decode "made of grey stone" produces the gold "grey stone", not the distractor "of
    grey".
    In `candidates`: the judged text contains the gold option and names another option.

repeat (degenerate repetition)
    The prediction's tokens are a gold's tokens two or more times over and nothing else
    ("1427 1427 1427 1427 1427 1427"; "1427, 1427" too, since punctuation is removed;
    "北京北京"), and the prediction is not itself an exact match of a gold. Six copies of
    a one-token gold fit the default length limit (3 * 1 + 3), so too_long does not catch
    this. In `candidates`: the judged text is an option's text repeated.

correct (`judge`, the `open`, `oneshot` and recovery rows)
    correct = contains and not echo and not too_long and not hedge and not repeat.
    An empty prediction (no tokens on its first non-empty line) is never correct and has
    every flag false and f1 0.0.

correct_sentence (the sentence-tolerant verdict, beside `correct`)
    A model that answers "The nearest town to Lake Varrow is Brennick." has produced the
    answer, in a sentence instead of the short form; `correct` calls that wrong (too_long),
    so a pruned model that drifts from terse answers to sentences would look as if it had
    lost them. correct_sentence is true when `correct` is, and also when the first
    sentence of the judged line (`first_sentence`; whatever follows it is not read)
    - contains a gold (as above) and is not echo, hedge or repeat (so it names no other
      option of the item, and does not copy the question);
    - sentences: a sentence ends at ".", "!", "?", "…" followed by whitespace and more text,
      or at "。", "！", "？", "।", "॥", "؟", "۔" followed by more text. A "." after a digit and
      before a digit ("1.5") or after a word of one to three letters starting with a capital
      ("Mt.", "St.", "J.") does not end a sentence. Thai writes no sentence punctuation:
      there the whole line is the first sentence and the length cap alone bounds it;
    - has at most  Q + G + sentence_slack  tokens up to the end of the clause that states
      the gold (`sentence_too_long` otherwise; "Brennick, which has a small harbour" adds to
      the answer), where Q is the question's token count and G the longest contained gold's
      (judge tokens, so CJK and Thai count characters as words). Default slack: 4;
    - is not a passage copy around the gold (`sentence_copy`): its whole token sequence
      occurs contiguously in the passage, it has at least G + 2 tokens, and fewer than half
      of its tokens outside the gold occur in the question. Restating the question's words
      around the gold is an answer; copying the passage's other words around it is not.
    `candidates`: the same, and the judged text must name exactly the gold option.
    `sentences` and `sentence_too_long` are reported for every non-empty prediction.

`candidates` format (`judge_candidates`: the prompt lists the options, the model picks one)
    Option labels, the judged text, options_named and pred_option: the module docstring
    of evaluation/candidates.py.

What the judge cannot detect: paraphrases and synonyms ("USA" for "United States"),
correct answers in another script or transliterated ("Moscow" for "Москва"), numbers in
other units or formats ("1.5 km" for "1500 m", "3rd of May" for "May 3"), the gold inside a
longer name in a script without capitals ("جامعة القاهرة"), and a denial by meaning alone
("open every Monday" for the day it is closed). docs/design.md lists these and the judge's
scores on its validation sets.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from benchmark_illusion import language
from benchmark_illusion.evaluation.text import first_line
from benchmark_illusion.textnorm import (
    contains_tokens,
    find_token_runs,
    is_unspaced_char,
    normalize,
    tokenize,
)

# Echo thresholds (see the module docstring, rule b).
_ECHO_MIN_TOKENS = 3
_ECHO_SHARE = 0.6


def named_phrases(pred: list[str], phrases: list[list[str]]) -> list[bool]:
    """For each phrase, whether `pred` names it (module docstring, "Naming an option").

    A phrase is named when it occurs in `pred` at a position not inside an occurrence of
    a longer phrase of `phrases`. Empty phrases are never named.
    """
    spans = [(i, i + len(p), k) for k, p in enumerate(phrases) for i in find_token_runs(pred, p)]
    named = [False] * len(phrases)
    for start, end, k in spans:
        if not any(s <= start and end <= e and e - s > end - start for s, e, _ in spans):
            named[k] = True
    return named


def _inside_gold(pred: list[str], phrase: list[str], golds: list[list[str]]) -> bool:
    """Every occurrence of `phrase` in `pred` partly overlaps an occurrence of a gold: the text is
    part of the gold as written ("of grey" in "made of grey stone", gold "grey stone"). An
    occurrence that covers a whole gold ("Tesla Motors" around the gold "Tesla") is not part of
    it."""
    spans = [(i, i + len(g)) for g in golds for i in find_token_runs(pred, g)]

    def partly(s: int) -> bool:
        e = s + len(phrase)
        return any(s < e2 and s2 < e and not (s <= s2 and e2 <= e) for s2, e2 in spans)

    runs = find_token_runs(pred, phrase)
    return bool(runs) and all(partly(s) for s in runs)


def answered_options(
    named: set[int], option_tokens: list[list[str]], question: list[str]
) -> set[int]:
    """The named options offered as answers: when two or more are named, those whose text is
    in the question are left out (a restatement names the question's subject: "The Pellan Bridge
    crosses the Sorr River" for "Which river does the Pellan Bridge cross?"), unless that would
    leave none."""
    if len(named) < 2:
        return named
    answered = {k for k in named if not contains_tokens(question, option_tokens[k])}
    return answered or named


def is_repeat(pred: list[str], gold: list[str]) -> bool:
    """`pred` is `gold` two or more times over and nothing else."""
    n = len(gold)
    return n > 0 and len(pred) >= 2 * n and len(pred) % n == 0 and pred == gold * (len(pred) // n)


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
    """The verdict on one prediction; see the module docstring for each definition.

    options_named is None when no options were given (`judge` without `options`);
    pred_option is set by `judge_candidates` only. judged is the text the flags were
    computed on (the first non-empty line; in `candidates` the text after a label, or
    the labelled option's text); it is not part of equality.
    """

    exact_match: bool
    f1: float
    contains: bool
    echo: bool
    too_long: bool
    correct: bool
    hedge: bool = False
    repeat: bool = False
    options_named: int | None = None
    pred_option: int | None = None
    judged: str = field(default="", compare=False)
    # the sentence-tolerant verdict and the flags behind it (module docstring)
    correct_sentence: bool = False
    sentences: int = 0
    sentence_too_long: bool = False
    sentence_copy: bool = False
    # reading the answer (module docstring, "What the answer says")
    negated: bool = False
    uncertain: bool = False
    longer_entity: bool = False
    match: str = ""
    correct_upper: bool = False
    correct_sentence_upper: bool = False

    def log_columns(self, lang: str) -> dict:
        """The judge's columns of an evaluation log row (docs/logs.md), pred_option aside."""
        return dict(
            correct=self.correct,
            exact_match=self.exact_match,
            f1=self.f1,
            contains=self.contains,
            echo=self.echo,
            too_long=self.too_long,
            hedge=self.hedge,
            repeat=self.repeat,
            options_named=self.options_named,
            answer_norm=normalize(self.judged, lang),
            correct_sentence=self.correct_sentence,
            sentences=self.sentences,
            sentence_too_long=self.sentence_too_long,
            sentence_copy=self.sentence_copy,
            negated=self.negated,
            uncertain=self.uncertain,
            longer_entity=self.longer_entity,
            match=self.match or None,
            correct_upper=self.correct_upper,
            correct_sentence_upper=self.correct_sentence_upper,
        )

    @property
    def status(self) -> str:
        """'correct', 'correct_sentence', 'negated', 'uncertain' or 'wrong' (the sentence-tolerant
        reading; 'correct' when the short-answer verdict holds too)."""
        if self.correct:
            return "correct"
        if self.correct_sentence:
            return "correct_sentence"
        if self.negated:
            return "negated"
        if self.uncertain:
            return "uncertain"
        return "wrong"


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
    """Rule c: the prediction shares a contiguous run of more than `max_run` tokens with the
    passage."""
    n = max_run + 1
    if len(pred) < n or len(passage) < n:
        return False
    # Only runs of exactly n tokens need checking: any longer shared run contains one.
    grams = {tuple(passage[i : i + n]) for i in range(len(passage) - n + 1)}
    return any(tuple(pred[i : i + n]) in grams for i in range(len(pred) - n + 1))


@dataclass(frozen=True)
class Match:
    """One occurrence of a gold in the prediction's tokens: pred[start:end] is gold `gold` (an
    index), written as `kind` ('exact', 'number', 'inflection' or 'toneless')."""

    start: int
    end: int
    gold: int
    kind: str


def _runs_where(pred: list[str], gold: list[str], same) -> list[int]:
    n = len(gold)
    return [
        i for i in range(len(pred) - n + 1) if all(same(pred[i + k], gold[k]) for k in range(n))
    ]


def gold_matches(pred: list[str], gold_tokens: list[list[str]], lang: str) -> list[Match]:
    """Every occurrence of a gold in `pred`: as written, with its numbers written the other way
    (language.number_variants), inflected (language.stems_match, STEMMED languages), and in
    Vietnamese without tone marks when the whole answer is written without them."""
    out: list[Match] = []
    # Vietnamese and Romanian are often typed without their marks: an answer written entirely
    # without them may match the gold without them (one with marks must match as written)
    vietnamese = language.base_lang(lang) in ("vi", "ro") and language.is_toneless(pred)
    for k, g in enumerate(gold_tokens):
        found = {i for i in find_token_runs(pred, g)}
        out += [Match(i, i + len(g), k, "exact") for i in sorted(found)]
        stemmed = language.base_lang(lang) in language.STEMMED

        def same(a: str, b: str) -> bool:
            return language.stems_match(a, b, lang)

        for v in language.number_variants(g, lang):
            runs = _runs_where(pred, v, same) if stemmed else find_token_runs(pred, v)
            out += [Match(i, i + len(v), k, "number") for i in runs]
        if stemmed:
            for i in _runs_where(pred, g, same):
                if i not in found:
                    out.append(Match(i, i + len(g), k, "inflection"))
        if vietnamese:
            bare = [language.strip_tones(t) for t in g]
            if bare != g:
                out += [Match(i, i + len(g), k, "toneless") for i in find_token_runs(pred, bare)]
    return out


# Capitalised words that start a name although the language lists them as function words
# ("New York", "San Marino", "La Paz"): before a gold they make it part of a longer name.
_NAME_STARTS = frozenset(
    "new san santa santo saint sainte st sankt los las la le el al van von mount mt lake port "
    "fort north south east west upper lower great little old nueva nuevo ciudad puerto villa "
    "university universidad universitat universität universitatea universita universite "
    "νεα νεος νεο αγιος αγια αγιοι ανω κατω "
    "нижний нижняя верхний верхняя новый новая новое великий великая старый старая".split()
)
# Words that join the parts of a name: "Santiago de Compostela", "University of Chicago".
_CONNECTORS = frozenset("de del della di da do dos das du von van of la le din y".split())
_NUMERALS = frozenset("零一二三四五六七八九十百千万亿两〇")


def whole_entity(
    m: Match,
    pred: list[str],
    toks,
    line: str,
    lang: str,
    named: list[tuple[int, int]],
) -> bool:
    """Whether the occurrence m stands as a whole entity, not inside a longer one (module
    docstring, "What the answer says"): in cased scripts, a gold written with a capital is not
    joined to a capitalised word in its clause ("Paris Hilton", "New York" for York); in Chinese
    and Thai, the occurrence starts and ends on the word segmenter's word breaks ("北京大学" for
    北京, "ทองแดง" for ทอง)."""
    if toks is None:
        return True
    first, last = toks[m.start], toks[m.end - 1]
    breaks = language.word_breaks(line, lang)
    a, b = first.start, last.end
    number = m.kind == "number" or all(ch.isdigit() or ch in _NUMERALS for ch in line[a:b])
    if breaks is not None and not number:
        # a number with its measure word or classifier is one word to the segmenter ("十二个")
        inside_a = 0 < a and _segmented(line[a - 1]) and _segmented(line[a])
        inside_b = b < len(line) and _segmented(line[b - 1]) and _segmented(line[b])
        if (inside_a and a not in breaks) or (inside_b and b not in breaks):
            return False
    code = language.base_lang(lang)
    # German writes every noun with a capital ("die Stadt Berlin", "Deutschlands Hauptstadt"):
    # capitals there say nothing about names
    if not first.capital or code == "de":
        return True
    covered = {i for a, b in named for i in range(a, b)}

    def name_word(i: int) -> bool:
        t = toks[i]
        return t.capital and len(t.text) > 1 and i not in covered

    # after: "Paris Hilton", "Washington State", "Santiago de Compostela"
    for at in (m.end, m.end + 1):
        if at >= len(pred) or toks[at].clause != last.clause or toks[at].sentence_start:
            break
        if at == m.end + 1 and pred[m.end] not in _CONNECTORS:
            break
        if name_word(at):
            return False
    # before: "New York", "University of Chicago"; a capital that only starts the sentence
    # counts where the word starts names (_NAME_STARTS)
    for at in (m.start - 1, m.start - 2):
        if at < 0 or toks[at].clause != first.clause:
            break
        if at == m.start - 2 and pred[m.start - 1] not in _CONNECTORS:
            break
        if name_word(at) and (
            toks[at].text in _NAME_STARTS
            or not (toks[at].sentence_start or language.is_function_word(toks[at].text, lang))
        ):
            return False
    return True


def _segmented(ch: str) -> bool:
    import unicodedata

    return (
        is_unspaced_char(ch) and not ch.isdigit() and not unicodedata.category(ch).startswith("P")
    )


@dataclass(frozen=True)
class Scores:
    """What the judge reads off one text against its golds (`read_scores`): the clean matches
    (whole, not negated, not an alternative) and the flags the verdicts combine."""

    exact_match: bool
    f1: float
    contained: list[list[str]]
    too_long: bool
    echo: bool
    negated: bool
    uncertain: bool
    longer_entity: bool
    match: str
    uncertain_contained: list[list[str]]
    clause_end: int = 0


def read_scores(
    text: str,
    pred: list[str],
    gold_tokens: list[list[str]],
    item: Asked,
    option_tokens: list[list[str]] | None = None,
    rivals: list[list[str]] | None = None,
) -> Scores:
    """exact_match, f1, the matched golds, too_long, echo, negated, uncertain and longer_entity of
    non-empty `pred` (the tokens of `text`). `rivals`: phrases whose occurrences a match must not
    overlap (the real golds, when a distractor is judged as if it were the gold)."""
    lang, passage = item.lang, item.passage
    toks = language.located_tokens(text, lang)
    matches = gold_matches(pred, gold_tokens, lang)
    if rivals:
        spans = [(i, i + len(r)) for r in rivals for i in find_token_runs(pred, r)]
        matches = [m for m in matches if not any(m.start < e and s < m.end for s, e in spans)]
    phrases = list(gold_tokens) + list(option_tokens or [])
    named = [(i, i + len(p)) for p in phrases for i in find_token_runs(pred, p)]
    named += [(m.start, m.end) for m in matches]
    if toks is not None:
        # an inflected match is not the first part of a hyphenated compound ("Москва-река" for
        # Москва; "Санкт-Петербурге" for Санкт-Петербург is fine)
        def compound_head(m: Match) -> bool:
            for k, t in enumerate(toks[m.start : m.end]):
                raw = text[t.start : t.end]
                if "-" in raw:
                    head = normalize(raw[: raw.rindex("-")], lang).replace(" ", "")
                    if len(gold_tokens[m.gold][k]) <= len(head) + 1:
                        return True
            return False

        matches = [m for m in matches if m.kind != "inflection" or not compound_head(m)]
    whole = [m for m in matches if whole_entity(m, pred, toks, text, lang, named)]
    clean, alternative = [], []
    negated_any = False
    for m in whole:
        if language.negated_at(pred, toks, m.start, m.end, lang):
            negated_any = True
        elif language.alternative_at(pred, toks, m.start, m.end, lang, named, text):
            alternative.append(m)
        else:
            clean.append(m)
    kinds = ("exact", "number", "inflection", "toneless")
    best = min(
        clean or alternative or [Match(0, 0, 0, "")],
        key=lambda m: kinds.index(m.kind) if m.kind in kinds else 9,
    )
    contained = _golds_of(clean, gold_tokens)
    reference = max(
        [m.end - m.start for m in clean or alternative] or [max(len(g) for g in gold_tokens)]
    )
    max_tokens = item.limits.max_length_factor * reference + item.limits.max_length_slack
    too_long = len(pred) > max_tokens
    qtoks = item.question_tokens
    echo = _question_echo(pred, contained or _golds_of(alternative, gold_tokens), qtoks)
    if not echo and too_long and passage:
        echo = _passage_copy(pred, tokenize(passage, lang), int(max_tokens))
    return Scores(
        exact_match=any(pred == g for g in gold_tokens),
        f1=max(_f1(pred, g) for g in gold_tokens),
        contained=contained,
        too_long=too_long,
        echo=echo,
        negated=negated_any and not clean and not alternative,
        uncertain=bool(alternative) and not clean,
        longer_entity=bool(matches) and not whole,
        match=best.kind,
        uncertain_contained=_golds_of(alternative, gold_tokens),
        clause_end=_clause_end(toks, clean or alternative, len(pred)),
    )


def _clause_end(toks, matches: list[Match], n: int) -> int:
    """Index just past the last token of the clause that holds the first match (n without
    positions or matches): what follows that clause ("Brennick, which has a small harbour") adds
    to the answer and is not counted against the sentence length."""
    if toks is None or not matches:
        return n
    m = min(matches, key=lambda m: m.start)
    clause = toks[m.end - 1].clause
    end = m.end
    while end < n and toks[end].clause == clause:
        end += 1
    return end


def _golds_of(matches: list[Match], gold_tokens: list[list[str]]) -> list[list[str]]:
    return [gold_tokens[k] for k in sorted({m.gold for m in matches})]


_SENTENCE_END_SPACED = frozenset(".!?\u2026")
_SENTENCE_END_UNSPACED = frozenset("\u3002\uff01\uff1f\u0964\u0965\u061f\u06d4")
_ABBREVIATION = re.compile(r"(?:^|[\s(])[A-Z][A-Za-z]{0,2}$")
SENTENCE_SLACK = 4


@dataclass(frozen=True)
class JudgeLimits:
    """The judge's length limits (module docstring): a short answer has at most
    max_length_factor * G + max_length_slack tokens, a one-sentence answer at most
    Q + G + sentence_slack."""

    max_length_factor: float = 3.0
    max_length_slack: int = 3
    sentence_slack: int = SENTENCE_SLACK


DEFAULT_LIMITS = JudgeLimits()


@dataclass(frozen=True)
class Asked:
    """What an answer is judged against besides its golds: the item's language, question (and
    its tokens) and passage, and the judge's limits (`Asked.of` tokenizes the question)."""

    lang: str
    question: str
    question_tokens: list[str]
    passage: str
    limits: JudgeLimits

    @classmethod
    def of(cls, lang: str, question: str, passage: str, limits: JudgeLimits) -> Asked:
        return cls(lang, question, tokenize(question, lang), passage, limits)


@dataclass(frozen=True)
class SentenceVerdict:
    """The sentence-tolerant verdict (`sentence_verdict`) and the flags behind it."""

    correct_sentence: bool
    sentences: int
    sentence_too_long: bool
    sentence_copy: bool


def _sentence_ends(line: str) -> list[int]:
    """Offsets just past each sentence end of `line` that has text before and after it."""
    ends, start = [], 0
    for i, ch in enumerate(line):
        rest = line[i + 1 :]
        if ch in _SENTENCE_END_UNSPACED:
            ends_here = any(c.isalnum() for c in rest)
        elif ch in _SENTENCE_END_SPACED:
            ends_here = bool(rest[:1].isspace()) and any(c.isalnum() for c in rest)
            if ends_here and ch == "." and _ABBREVIATION.search(line[start:i]):
                ends_here = False
        else:
            continue
        if ends_here and any(c.isalnum() for c in line[start:i]):
            ends.append(i + 1)
            start = i + 1
    return ends


def sentence_count(line: str) -> int:
    """How many sentences `line` holds (module docstring, correct_sentence); 0 when it has
    no letter or digit."""
    ends = _sentence_ends(line)
    tail = line[ends[-1] :] if ends else line
    return len(ends) + (1 if any(c.isalnum() for c in tail) else 0)


def first_sentence(line: str) -> str:
    """The first sentence of `line` (the whole line when it holds one sentence)."""
    ends = _sentence_ends(line)
    return line[: ends[0]].strip() if ends else line


def _sentence_flags(pred: list[str], contained: list[list[str]], item: Asked) -> tuple[bool, bool]:
    """sentence_too_long and sentence_copy of a non-empty prediction."""
    question, passage, lang = item.question_tokens, item.passage, item.lang
    reference = max(contained, key=len) if contained else []
    too_long = len(pred) > len(question) + len(reference) + item.limits.sentence_slack
    copy = False
    if contained and passage and len(pred) >= len(reference) + 2:
        if contains_tokens(tokenize(passage, lang), pred):
            runs = find_token_runs(pred, reference)
            start = runs[0] if runs else 0
            rest = pred[:start] + pred[start + len(reference) :]
            qset = set(question)
            copy = sum(1 for t in rest if t in qset) < 0.5 * len(rest)
    return too_long, copy


def _hedge_and_named(
    lang: str,
    pred: list[str],
    contained: bool,
    gold_tokens: list[list[str]],
    option_tokens: list[list[str]],
    question: list[str],
) -> tuple[bool, int]:
    """hedge and options_named of `judge` (module docstring, "hedge")."""
    named = named_phrases(pred, option_tokens + gold_tokens)[: len(option_tokens)]
    # an option written with its number the other way ("Doce o tres" for the options 12 and
    # 3), or inflected or with a clitic in a stemmed language ("وكريم النجار")
    stemmed = language.base_lang(lang) in language.STEMMED

    def inflected(toks: list[str]) -> bool:
        return stemmed and bool(
            _runs_where(pred, toks, lambda a, b: language.stems_match(a, b, lang))
        )

    named = [
        n
        or (
            toks not in gold_tokens
            and (
                any(contains_tokens(pred, v) for v in language.number_variants(toks, lang))
                or inflected(toks)
            )
        )
        for n, toks in zip(named, option_tokens, strict=True)
    ]
    named = [
        n
        and (toks in gold_tokens or not _inside_gold(pred, toks, gold_tokens))
        and not (len(toks) == 1 and language.is_function_word(toks[0], lang))
        for n, toks in zip(named, option_tokens, strict=True)
    ]
    kept = answered_options(set(k for k, n in enumerate(named) if n), option_tokens, question)
    hedge = contained and any(option_tokens[k] not in gold_tokens for k in kept)
    return hedge, len(kept)


def judge(
    prediction: str,
    golds: list[str],
    lang: str,
    question: str = "",
    passage: str = "",
    options: list[str] | None = None,
    rivals: list[str] | None = None,
    limits: JudgeLimits = DEFAULT_LIMITS,
) -> Judgement:
    """Judge the first non-empty line of `prediction` against `golds`.

    Promises exactly the definitions of the module docstring: correct is a clean match (whole,
    not negated, not an alternative) and not echo, too_long, hedge or repeat. `options` (the
    item's options, gold included) enable hedge and options_named; without them hedge is false
    and options_named None. `rivals`: texts whose occurrences a gold's occurrence must not
    overlap (the false-recovery control passes the item's real golds when it judges a
    distractor as if it were the gold). `limits`: the length limits (`JudgeLimits`). An empty
    prediction, or one judged against golds that all have no tokens, gets the all-false
    Judgement with f1 0.0 (options_named 0 when options are given).
    """
    line = first_line(prediction)
    pred = tokenize(line, lang)
    gold_tokens = [toks for toks in (tokenize(g, lang) for g in golds) if toks]
    n_options = None if options is None else 0
    if not pred or not gold_tokens:
        return Judgement(
            False, 0.0, False, False, False, False, options_named=n_options, judged=line
        )
    option_tokens = None if options is None else [tokenize(o, lang) for o in options]
    rival_tokens = [t for t in (tokenize(r, lang) for r in rivals or []) if t]
    item = Asked.of(lang, question, passage, limits)
    qtoks = item.question_tokens

    def verdict(text: str, toks: list[str], s: Scores) -> tuple[bool, bool, bool, bool, int]:
        """correct, correct if uncertain counted right, hedge, repeat, options named."""
        hedge, named = False, n_options
        if option_tokens is not None:
            hedge, named = _hedge_and_named(
                lang,
                toks,
                bool(s.contained or s.uncertain_contained),
                gold_tokens,
                option_tokens,
                qtoks,
            )
        repeat = not s.exact_match and any(is_repeat(toks, g) for g in gold_tokens)
        fine = not s.echo and not s.too_long and not hedge and not repeat
        return (
            bool(s.contained) and fine,
            bool(s.uncertain_contained) and fine,
            hedge,
            repeat,
            named,
        )

    s = read_scores(line, pred, gold_tokens, item, option_tokens, rival_tokens)
    correct, correct_upper, hedge, repeat, n_options = verdict(line, pred, s)
    # the sentence-tolerant verdict reads the first sentence, whatever follows it
    sentence_text = first_sentence(line)
    if sentence_text != line:
        stoks = tokenize(sentence_text, lang)
        ss = (
            read_scores(sentence_text, stoks, gold_tokens, item, option_tokens, rival_tokens)
            if stoks
            else s
        )
        s_hedge, s_repeat = verdict(sentence_text, stoks, ss)[2:4] if stoks else (hedge, repeat)
    else:
        stoks, ss, s_hedge, s_repeat = pred, s, hedge, repeat
    sentence = sentence_verdict(line, stoks, ss, item, correct, s_hedge or s_repeat)
    upper = sentence_verdict(
        line, stoks, ss, item, correct_upper, s_hedge or s_repeat, uncertain_counted=True
    )
    return judgement(
        s,
        sentence,
        correct_sentence_upper=upper.correct_sentence,
        contains=bool(s.contained),
        correct=correct,
        correct_upper=correct_upper,
        hedge=hedge,
        repeat=repeat,
        options_named=n_options,
        judged=line,
        negated=ss.negated if sentence_text != line and not s.negated else s.negated,
        match=s.match if (s.contained or s.uncertain_contained) else "",
    )


def judgement(
    s: Scores,
    sentence: SentenceVerdict,
    *,
    correct_sentence_upper: bool,
    contains: bool,
    correct: bool,
    correct_upper: bool,
    hedge: bool,
    repeat: bool,
    options_named: int | None,
    judged: str,
    negated: bool,
    match: str,
    pred_option: int | None = None,
    bare: bool = False,
) -> Judgement:
    """The Judgement of `judge` and of `judge_candidates` from the reading `s`, the sentence
    verdict and the caller's own verdict. bare (a `candidates` label alone): the reading's echo,
    too_long, uncertain and longer_entity do not apply, the label's option text was not written.
    correct_upper and correct_sentence_upper: the upper bounds, each or-ed with its verdict."""
    return Judgement(
        exact_match=s.exact_match,
        f1=s.f1,
        contains=contains,
        echo=s.echo and not bare,
        too_long=s.too_long and not bare,
        correct=correct,
        hedge=hedge,
        repeat=repeat,
        options_named=options_named,
        pred_option=pred_option,
        judged=judged,
        negated=negated,
        uncertain=s.uncertain and not bare,
        longer_entity=s.longer_entity and not bare,
        match=match,
        correct_upper=correct or correct_upper,
        correct_sentence=sentence.correct_sentence,
        sentences=sentence.sentences,
        sentence_too_long=sentence.sentence_too_long,
        sentence_copy=sentence.sentence_copy,
        correct_sentence_upper=sentence.correct_sentence or correct_sentence_upper,
    )


def sentence_verdict(
    line: str,
    pred: list[str],
    s: Scores,
    item: Asked,
    correct: bool,
    named_other: bool,
    uncertain_counted: bool = False,
) -> SentenceVerdict:
    """correct_sentence and its flags (module docstring), on the tokens `pred` of the line's
    first sentence. Rule c of echo (a passage copy longer than the short-answer limit) is
    replaced by sentence_copy; rules a and b stay. uncertain_counted: the upper bound, an answer
    offered beside an alternative counted as stating the gold."""
    contained = s.contained or (s.uncertain_contained if uncertain_counted else [])
    too_long, copy = _sentence_flags(pred, contained, item)
    if too_long and s.clause_end < len(pred):
        too_long = _sentence_flags(pred[: s.clause_end], contained, item)[0]
    ok = (
        bool(contained)
        and not named_other
        and not _question_echo(pred, contained, item.question_tokens)
        and not too_long
        and not copy
    )
    return SentenceVerdict(
        correct_sentence=correct or ok,
        sentences=sentence_count(line),
        sentence_too_long=too_long,
        sentence_copy=copy,
    )
