"""Judge a `candidates` answer: the prompt lists the options, the model picks one by label or text.

Naming an option, hedge, repeat and the sentence-tolerant verdict are defined in the module
docstring of judge.py; texts are compared as the tokens of textnorm.py.

`candidates` format (`judge_candidates`: the prompt lists the options, the model picks one)
    The output is correct only when it names exactly one option and that option is the
    gold. On the first non-empty line (after NFKC, so full-width "（Ｃ）" reads "(C)"):
    - with letters (prompt style "letters", options shown as "A. text"), a leading label
      names the option of that letter: "C", "C.", "C:", "(C)", "C)", "[C]", and followed
      by text "C. text", "C: text", "(C) text", "C) text"; "。" and "、" work like "."
      (Chinese and Japanese answers write "C、北京"). After "." or ":" the text must not
      start with a Latin letter, so "E.ON" and "e.g. 1427" are not labels.
      Label letters are A-H (only as many as there are options), upper or lower case,
      and the Greek and Cyrillic capitals that look like them: Greek Α Β Ε Η read A B E
      H, Cyrillic А В С Е Н read A B C E H (a model writing in those scripts may pick
      the look-alike key). A word that merely starts with a letter ("An answer", "A
      cat") is not a label;
    - the judged text is the text after a label, the label's option text for a bare
      label, or the whole line when there is no label. Options named by the judged text
      (see "Naming an option", judge.py) are added to the label's option;
    - options_named is how many different options are named; pred_option is the one
      named option (None when none or several are named);
    - with letters=False (prompt style "bullets", options shown as "- text") there are no
      labels: only naming by text counts.
    exact_match, f1, contains, echo and too_long compare the judged text with the gold
    option's text as `judge` does (echo and too_long are false for a bare label), hedge
    and repeat as judge.py defines them. correct = options_named == 1 and pred_option ==
    gold_option and contains and not echo and not too_long and not hedge and not repeat; so a label
    followed by text naming another option ("C. 1500" where C is 1427 and B is 1500) or
    by text that is not the label's option ("C. Talbach") is wrong, and listing
    "1500, 1427, 1600, 1700" is wrong (options_named 4, hedge).
"""

from __future__ import annotations

import re
import unicodedata

from benchmark_illusion.evaluation.judge import (
    DEFAULT_LIMITS,
    Asked,
    JudgeLimits,
    Judgement,
    answered_options,
    is_repeat,
    judgement,
    named_phrases,
    read_scores,
    sentence_verdict,
)
from benchmark_illusion.evaluation.prompts import LETTERS
from benchmark_illusion.evaluation.text import first_line
from benchmark_illusion.textnorm import tokenize

# Option labels: the prompt's letters (A-H) in either case, and the Greek and Cyrillic
# capitals that look like Latin capitals (module docstring, `candidates` format).
LABEL_LETTERS = LETTERS
_LABEL_LOOKALIKES = {
    "\u0391": "A",
    "\u0392": "B",
    "\u0395": "E",
    "\u0397": "H",  # Greek Α Β Ε Η
    "\u0410": "A",
    "\u0412": "B",
    "\u0421": "C",
    "\u0415": "E",
    "\u041d": "H",  # Cyrillic А В С Е Н
}
_L = "[A-Ha-h" + "".join(_LABEL_LOOKALIKES) + "]"
_BARE_LABEL = re.compile(rf"^(?:\(({_L})\)|\[({_L})\]|({_L})[).:。、]?)[.:。、]?$")
# After "." or ":" (or the CJK "。" "、") the text must not start with a Latin letter, so
# "E.ON", "e.g. 1427" and "A.D. 1427" are not labels, while "A. 1427" and "Ａ．１４２７" are.
_TEXT_LABEL = re.compile(
    rf"^(?:\(({_L})\)|\[({_L})\]|({_L})\)|({_L})[.:。、](?![A-Za-z]))\s*(.+)$", re.S
)


def option_label(line: str, n_options: int) -> tuple[int | None, str]:
    """(index of the option a leading label names, the text after the label).

    (None, line) when `line` does not start with a label of one of the first `n_options`
    letters. The line is NFKC-normalised first, so the returned text is too.
    """
    text = unicodedata.normalize("NFKC", line).strip()
    m = _BARE_LABEL.match(text)
    rest = ""
    if m is None:
        m = _TEXT_LABEL.match(text)
        if m is None:
            return None, line
        rest = m.group(m.lastindex).strip()
    letter = next(g for g in m.groups() if g)
    letter = _LABEL_LOOKALIKES.get(letter, letter).upper()
    k = LABEL_LETTERS.find(letter)
    if k < 0 or k >= n_options:
        return None, line
    return k, rest


def judge_candidates(
    output: str,
    options: list[str],
    gold_option: int,
    lang: str,
    question: str = "",
    passage: str = "",
    letters: bool = True,
    limits: JudgeLimits = DEFAULT_LIMITS,
) -> Judgement:
    """Judge a `candidates` answer: correct only when it names exactly the gold option.

    Promises the module docstring's `candidates` rules. `letters` is True for the
    "letters" prompt style (labels A-H count), False for "bullets" (only option texts).
    """
    if not 0 <= gold_option < len(options):
        raise ValueError(f"gold_option {gold_option} is not an index of {len(options)} options")
    line = first_line(output)
    label, judged = option_label(line, len(options)) if letters else (None, line)
    bare = label is not None and not judged
    if bare:
        judged = options[label]
    pred = tokenize(judged, lang)
    item = Asked.of(lang, question, passage, limits)
    option_tokens = [tokenize(o, lang) for o in options]
    named = set() if bare else {k for k, n in enumerate(named_phrases(pred, option_tokens)) if n}
    named = answered_options(named, option_tokens, item.question_tokens)
    if label is not None:
        named.add(label)
    pred_option = next(iter(named)) if len(named) == 1 else None
    gold_tokens = option_tokens[gold_option]
    if not pred or not gold_tokens:
        return Judgement(
            False,
            0.0,
            False,
            False,
            False,
            False,
            options_named=len(named),
            pred_option=pred_option,
            judged=judged,
        )

    s = read_scores(judged, pred, [gold_tokens], item, option_tokens)
    echo, too_long = (False, False) if bare else (s.echo, s.too_long)
    contained = bool(s.contained) or (bare and label == gold_option)
    hedge = contained and any(k != gold_option for k in named)
    repeat = not any(pred == t for t in option_tokens) and any(
        is_repeat(pred, t) for t in option_tokens
    )
    fine = pred_option == gold_option and not echo and not too_long and not hedge and not repeat
    correct = contained and fine
    sentence = sentence_verdict(
        judged, pred, s, item, correct, pred_option != gold_option or hedge or repeat
    )
    upper = bool(s.uncertain_contained) and fine
    return judgement(
        s,
        sentence,
        correct_sentence_upper=upper,
        contains=contained,
        correct=correct,
        correct_upper=upper,
        hedge=hedge,
        repeat=repeat,
        options_named=len(named),
        judged=judged,
        negated=s.negated and not bare,
        match=s.match,
        pred_option=pred_option,
        bare=bare,
    )
