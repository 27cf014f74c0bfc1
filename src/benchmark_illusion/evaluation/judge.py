"""Judge a generated answer against the gold answers of an extractive-QA item.

Pruned models produce degenerate output (the question repeated back, a stretch of the
passage copied out, long rambles, every option listed, the gold said six times) that
games a naive "does the answer contain the gold string" test. The definitions below are
language-aware and reject those cases.

Texts are compared as tokens: `normalize` and `tokenize` (evaluation/text.py, whose module
docstring gives their rules) fold case, script variants, digits and punctuation the same
way in every language, and make each CJK, kana and Thai character a token of its own.

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
    is not a gold ("1432 or 1427" with the options 1427 and 1432, gold 1427). The phrase
    set is the options and the golds, so a distractor inside a named gold does not count,
    and neither does one whose every occurrence overlaps the gold as written (the passage
    span "of grey" in "made of grey stone", gold "grey stone"). In `candidates` such an
    overlap stays ambiguous: both options are named.
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
    lost them. correct_sentence is true when `correct` is, and also when the judged line
    - contains a gold (as whole tokens) and is not echo, hedge or repeat (so it names no
      other option of the item, and does not copy the question);
    - is one sentence (`sentence_count` == 1): a sentence ends at ".", "!", "?", "…" followed
      by whitespace and more text, or at "。", "！", "？", "।", "॥", "؟", "۔" followed by more
      text. A "." after a digit and before a digit ("1.5") or after a word of one to three
      letters starting with a capital ("Mt.", "St.", "J.") does not end a sentence. Thai
      writes no sentence punctuation: there the length cap alone bounds the answer;
    - has at most  Q + G + sentence_slack  tokens (`sentence_too_long` otherwise), where Q is
      the question's token count and G the longest contained gold's (judge tokens, so CJK
      and Thai count characters as words). Default slack: 4;
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
correct answers in another script or transliterated ("Moscow" for "Москва"), numbers
written as words ("twelve" for "12") or in other units or formats ("1.5 km" for "1500 m",
"3rd of May" for "May 3"), and a wrong answer that happens to contain the gold's tokens
("not Paris").
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from benchmark_illusion.evaluation.text import (
    contains_tokens,
    find_token_runs,
    first_line,
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


def _answered(named: set[int], option_tokens: list[list[str]], question: list[str]) -> set[int]:
    """The named options offered as answers: when two or more are named, those whose text is
    in the question are left out (a restatement names the question's subject: "The Pellan Bridge
    crosses the Sorr River" for "Which river does the Pellan Bridge cross?"), unless that would
    leave none."""
    if len(named) < 2:
        return named
    answered = {k for k in named if not contains_tokens(question, option_tokens[k])}
    return answered or named


def _is_repeat(pred: list[str], gold: list[str]) -> bool:
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


_EMPTY = Judgement(
    exact_match=False, f1=0.0, contains=False, echo=False, too_long=False, correct=False
)


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


def _scores(
    pred: list[str],
    gold_tokens: list[list[str]],
    lang: str,
    question: str,
    passage: str,
    max_length_factor: float,
    max_length_slack: int,
) -> dict:
    """exact_match, f1, the contained golds, too_long and echo of non-empty `pred`."""
    contained = [g for g in gold_tokens if contains_tokens(pred, g)]
    # Measure length against the gold actually given, so a long gold does not
    # license a long answer that only contains a short gold.
    reference = max(contained or gold_tokens, key=len)
    max_tokens = max_length_factor * len(reference) + max_length_slack
    too_long = len(pred) > max_tokens
    echo = _question_echo(pred, contained, tokenize(question, lang))
    if not echo and too_long and passage:
        echo = _passage_copy(pred, tokenize(passage, lang), int(max_tokens))
    return dict(
        exact_match=any(pred == g for g in gold_tokens),
        f1=max(_f1(pred, g) for g in gold_tokens),
        contained=contained,
        too_long=too_long,
        echo=echo,
    )


_SENTENCE_END_SPACED = frozenset(".!?\u2026")
_SENTENCE_END_UNSPACED = frozenset("\u3002\uff01\uff1f\u0964\u0965\u061f\u06d4")
_ABBREVIATION = re.compile(r"(?:^|[\s(])[A-Z][A-Za-z]{0,2}$")
SENTENCE_SLACK = 4


def sentence_count(line: str) -> int:
    """How many sentences `line` holds (module docstring, correct_sentence); 0 when it has
    no letter or digit."""
    count, start = 0, 0
    for i, ch in enumerate(line):
        rest = line[i + 1 :]
        if ch in _SENTENCE_END_UNSPACED:
            ends = any(c.isalnum() for c in rest)
        elif ch in _SENTENCE_END_SPACED:
            ends = bool(rest[:1].isspace()) and any(c.isalnum() for c in rest)
            if ends and ch == "." and _ABBREVIATION.search(line[start:i]):
                ends = False
        else:
            continue
        if ends and any(c.isalnum() for c in line[start:i]):
            count, start = count + 1, i + 1
    return count + (1 if any(c.isalnum() for c in line[start:]) else 0)


def _sentence_flags(
    line: str,
    pred: list[str],
    contained: list[list[str]],
    question: list[str],
    passage: str,
    lang: str,
    sentence_slack: int,
) -> tuple[int, bool, bool]:
    """sentences, sentence_too_long and sentence_copy of a non-empty prediction."""
    reference = max(contained, key=len) if contained else []
    too_long = len(pred) > len(question) + len(reference) + sentence_slack
    copy = False
    if contained and passage and len(pred) >= len(reference) + 2:
        if contains_tokens(tokenize(passage, lang), pred):
            start = find_token_runs(pred, reference)[0]
            rest = pred[:start] + pred[start + len(reference) :]
            qset = set(question)
            copy = sum(1 for t in rest if t in qset) < 0.5 * len(rest)
    return sentence_count(line), too_long, copy


def judge(
    prediction: str,
    golds: list[str],
    lang: str,
    question: str = "",
    passage: str = "",
    max_length_factor: float = 3.0,
    max_length_slack: int = 3,
    options: list[str] | None = None,
    sentence_slack: int = SENTENCE_SLACK,
) -> Judgement:
    """Judge the first non-empty line of `prediction` against `golds`.

    Promises exactly the definitions of the module docstring: correct is contains and
    not echo and not too_long and not hedge and not repeat. `options` (the item's
    options, gold included) enable hedge and options_named; without them hedge is false
    and options_named None. An empty prediction, or one judged against golds that all
    have no tokens, gets the all-false Judgement with f1 0.0 (options_named 0 when
    options are given).
    """
    line = first_line(prediction)
    pred = tokenize(line, lang)
    gold_tokens = [toks for toks in (tokenize(g, lang) for g in golds) if toks]
    n_options = None if options is None else 0
    if not pred or not gold_tokens:
        return Judgement(
            False, 0.0, False, False, False, False, options_named=n_options, judged=line
        )

    s = _scores(pred, gold_tokens, lang, question, passage, max_length_factor, max_length_slack)
    contained = bool(s["contained"])
    hedge = False
    if options is not None:
        option_tokens = [tokenize(o, lang) for o in options]
        named = named_phrases(pred, option_tokens + gold_tokens)[: len(option_tokens)]
        named = [
            n and (toks in gold_tokens or not _inside_gold(pred, toks, gold_tokens))
            for n, toks in zip(named, option_tokens, strict=True)
        ]
        kept = _answered(
            set(k for k, n in enumerate(named) if n), option_tokens, tokenize(question, lang)
        )
        n_options = len(kept)
        hedge = contained and any(option_tokens[k] not in gold_tokens for k in kept)
    repeat = not s["exact_match"] and any(_is_repeat(pred, g) for g in gold_tokens)
    correct = contained and not s["echo"] and not s["too_long"] and not hedge and not repeat
    sentence = _sentence_verdict(
        line, pred, s, question, passage, lang, sentence_slack, correct, hedge or repeat
    )
    return Judgement(
        exact_match=s["exact_match"],
        f1=s["f1"],
        contains=contained,
        echo=s["echo"],
        too_long=s["too_long"],
        correct=correct,
        hedge=hedge,
        repeat=repeat,
        options_named=n_options,
        judged=line,
        **sentence,
    )


def _sentence_verdict(
    line: str,
    pred: list[str],
    s: dict,
    question: str,
    passage: str,
    lang: str,
    sentence_slack: int,
    correct: bool,
    named_other: bool,
) -> dict:
    """correct_sentence and its flags (module docstring). Rule c of echo (a passage copy
    longer than the short-answer limit) is replaced by sentence_copy; rules a and b stay."""
    qtoks = tokenize(question, lang)
    sentences, too_long, copy = _sentence_flags(
        line, pred, s["contained"], qtoks, passage, lang, sentence_slack
    )
    ok = (
        bool(s["contained"])
        and not named_other
        and not _question_echo(pred, s["contained"], qtoks)
        and sentences == 1
        and not too_long
        and not copy
    )
    return dict(
        correct_sentence=correct or ok,
        sentences=sentences,
        sentence_too_long=too_long,
        sentence_copy=copy,
    )
