"""Tests for benchmark_illusion.textnorm, evaluation.text, judge and candidates: normalisation,
tokens, metrics and the echo and length rules."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from benchmark_illusion.evaluation.candidates import judge_candidates, option_label
from benchmark_illusion.evaluation.judge import (
    JudgeLimits,
    Judgement,
    contains,
    exact_match,
    judge,
    named_phrases,
    sentence_count,
    token_f1,
)
from benchmark_illusion.evaluation.text import first_line
from benchmark_illusion.textnorm import normalize, tokenize

Q_FR = "What is the capital of France?"
PASSAGE_FR = (
    "Paris is the capital and most populous city of France, with an estimated "
    "population of 2,102,650 residents in January 2023."
)


# --- normalize -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lang", "expected"),
    [
        ("北京。", "zh", "北京"),
        ("「北京」，", "zh", "北京"),
        ("ＡＢＣ１２３", "zh", "abc123"),  # full-width letters/digits via NFKC
        ("القاهرة،", "ar", "القاهرة"),
        ("ما هي عاصمة مصر؟", "ar", "ما هي عاصمة مصر"),
        ("दिल्ली।", "hi", "दिल्ली"),
        ("Straße", "de", "strasse"),
        ("¿Dónde está Madrid?", "es", "dónde está madrid"),
        ("«Guerra y paz»", "es", "guerra y paz"),
        ("  The   Beatles!  ", "en", "beatles"),
        ("A cat and an owl", "en", "cat and owl"),
        ("Theatre", "en", "theatre"),  # articles only as whole words
        ("The Beatles", "de", "the beatles"),  # articles dropped only for English
        ("1,500", "en", "1500"),
    ],
)
def test_normalize(text, lang, expected):
    assert normalize(text, lang) == expected


def test_normalize_keeps_devanagari_combining_marks():
    out = normalize("दिल्ली।", "hi")
    # द ि ल ् ल ी: the vowel signs and virama (category M*) must survive.
    assert out == "\u0926\u093f\u0932\u094d\u0932\u0940"
    assert len(out) == 6


def test_normalize_chinese_fullwidth_punctuation_matches_bare():
    assert normalize("北京。", "zh") == normalize("北京", "zh")
    assert exact_match("北京。", "北京", "zh")


# --- tokenize --------------------------------------------------------------


def test_tokenize_splits_unspaced_scripts_per_character_but_keeps_digit_runs():
    assert tokenize("答案是北京", "zh") == ["答", "案", "是", "北", "京"]
    assert tokenize("2008年北京", "zh") == ["2008", "年", "北", "京"]
    assert tokenize("1500", "en") == ["1500"]
    assert tokenize("東京タワー", "ja") == ["東", "京", "タ", "ワ", "ー"]
    assert tokenize("กรุงเทพ", "th") == ["ก", "ร", "ุ", "ง", "เ", "ท", "พ"]
    assert tokenize("It is Paris.", "en") == ["it", "is", "paris"]


def test_first_line():
    assert first_line("\n  \n  Paris \nLondon is big") == "Paris"
    assert first_line("") == ""
    assert first_line(" \n\t\n") == ""


# --- metrics ---------------------------------------------------------------


def test_contains_is_token_boundary_aware():
    assert contains("It is Paris", "Paris", "en")
    assert not contains("1500", "5", "en")
    assert not contains("15 00", "5", "en")
    assert contains("in 5 days", "5", "en")
    assert not contains("Parisian", "Paris", "en")
    assert contains("答案是北京", "北京", "zh")
    assert not contains("答案是北", "北京", "zh")  # only half the gold
    assert contains("คำตอบคือกรุงเทพ", "กรุงเทพ", "th")
    assert not contains("anything", "", "en")


def test_exact_match_and_f1():
    assert exact_match("The Beatles!", "beatles", "en")
    assert not exact_match("", "", "en")
    assert token_f1("Paris", "Paris", "en") == 1.0
    # pred {capital, is, paris} vs gold {paris}: P = 1/3, R = 1 -> F1 = 0.5
    assert token_f1("The capital is Paris", "Paris", "en") == pytest.approx(0.5)
    # pred {new, york, city} vs gold {new, york}: P = 2/3, R = 1 -> F1 = 0.8
    assert token_f1("New York City", "New York", "en") == pytest.approx(0.8)
    assert token_f1("London", "Paris", "en") == 0.0
    assert token_f1("", "Paris", "en") == 0.0


# --- judge -----------------------------------------------------------------


@pytest.mark.parametrize("prediction", ["Paris", "The capital is Paris", "Paris, France", "paris."])
def test_short_answers_with_the_gold_are_correct(prediction):
    j = judge(prediction, ["Paris"], "en", question=Q_FR, passage=PASSAGE_FR)
    assert j.contains and not j.echo and not j.too_long
    assert j.correct


def test_question_echo_with_gold_inside_is_not_correct():
    j = judge(
        "What is the capital of France? Paris", ["Paris"], "en", question=Q_FR, passage=PASSAGE_FR
    )
    assert j.contains
    assert j.echo
    assert not j.too_long  # 6 tokens <= 3 * 1 + 3: only the echo rule catches it
    assert not j.correct


def test_declarative_restatement_is_an_answer_not_an_echo():
    # The gold is not in the question, so containment cannot come from copying it.
    j = judge("The capital of France is Paris", ["Paris"], "en", question=Q_FR)
    assert j.contains and not j.echo and j.correct


def test_question_echo_when_gold_occurs_in_the_question():
    q = "Is Varrow bigger than Mellen?"
    # 4 of 4 tokens are question tokens and the gold is one of them: an echo.
    bad = judge("Varrow bigger than Mellen", ["Varrow"], "en", question=q)
    assert bad.contains and bad.echo and not bad.correct
    # Two tokens only (< 3): a short answer that happens to reuse question words is fine.
    ok = judge("Varrow, bigger", ["Varrow"], "en", question=q)
    assert ok.contains and not ok.echo and ok.correct
    # 2 question tokens (varrow, is) out of 5 (< 60%): not mostly question.
    ok2 = judge("Varrow is the larger lake", ["Varrow"], "en", question=q)
    assert not ok2.echo and ok2.correct


def test_question_copy_without_gold_is_echo_and_wrong():
    j = judge("What is the capital of France?", ["Paris"], "en", question=Q_FR)
    assert j.echo and not j.contains and not j.correct


def test_question_echo_in_chinese():
    q = "北京和上海哪个更大？"  # 10 tokens, the gold 北京 among them
    bad = judge("北京和上海哪个", ["北京"], "zh", question=q)  # 7 tokens, all from the question
    assert bad.contains and bad.echo and not bad.correct
    ok = judge("答案是北京", ["北京"], "zh", question="中国的首都是哪里？")  # gold not in question
    assert ok.correct and not ok.echo


def test_long_passage_copy_containing_gold_is_not_correct():
    j = judge(PASSAGE_FR, ["Paris"], "en", question=Q_FR, passage=PASSAGE_FR)
    assert j.contains
    assert j.too_long
    assert j.echo  # a copied stretch of the passage, not just long text
    assert not j.correct


def test_long_free_text_is_too_long_but_not_passage_echo():
    pred = "well I think that it might be Paris in the end if you ask me about it"
    j = judge(pred, ["Paris"], "en", question=Q_FR, passage=PASSAGE_FR)
    assert j.contains and j.too_long and not j.echo and not j.correct


def test_length_limit_boundary():
    # Gold "New York" has 2 tokens: limit 3 * 2 + 3 = 9 tokens.
    nine = "x b c d e f g New York"  # 9 tokens (no English articles to drop)
    assert len(tokenize(nine, "en")) == 9
    assert not judge(nine, ["New York"], "en").too_long
    assert judge("z " + nine, ["New York"], "en").too_long
    assert judge("z " + nine, ["New York"], "en", limits=JudgeLimits(max_length_slack=4)).correct


def test_too_long_uses_the_contained_gold_not_the_longest():
    golds = ["Paris", "the city of Paris in northern France"]
    j = judge("x y z w v u Paris", golds, "en")  # 7 tokens > 3 * 1 + 3
    assert j.contains and j.too_long and not j.correct


def test_empty_prediction_is_never_correct():
    for pred in ["", "   ", "\n\n", "?!", "。"]:
        j = judge(pred, ["Paris"], "en", question=Q_FR)
        assert j == Judgement(False, 0.0, False, False, False, False)


def test_no_usable_gold_is_never_correct():
    assert not judge("Paris", [], "en").correct
    assert not judge("Paris", ["", "..."], "en").correct


def test_multiple_golds():
    golds = ["Denver Broncos", "Broncos", "the Broncos"]
    j = judge("Broncos", golds, "en")
    assert j.exact_match and j.f1 == 1.0 and j.contains and j.correct
    j = judge("The Denver team", golds, "en")
    # best F1 against "Denver Broncos": {denver} common, P = 1/2, R = 1/2 -> 0.5
    assert not j.contains and j.f1 == pytest.approx(0.5) and not j.correct


def test_only_the_first_line_is_judged():
    j = judge(
        "Paris\nLondon is the capital of England, and the question was about France",
        ["Paris"],
        "en",
        question=Q_FR,
    )
    assert j.exact_match and j.correct
    j = judge("I am not sure.\nParis", ["Paris"], "en")
    assert not j.contains and not j.correct


def test_digit_run_does_not_contain_shorter_number():
    j = judge("1500", ["5"], "en")
    assert not j.contains and not j.correct
    assert judge("In 1887.", ["1887"], "en").correct


@pytest.mark.parametrize(
    ("prediction", "gold", "lang"),
    [
        ("答案是北京。", "北京", "zh"),
        ("القاهرة،", "القاهرة", "ar"),
        ("दिल्ली।", "दिल्ली", "hi"),
        ("Die Straße", "Strasse", "de"),
        ("¡Madrid!", "Madrid", "es"),
    ],
)
def test_correct_across_languages(prediction, gold, lang):
    assert judge(prediction, [gold], lang).correct


def test_judgement_is_frozen():
    j = judge("Paris", ["Paris"], "en")
    with pytest.raises(dataclasses.FrozenInstanceError):
        j.correct = False  # type: ignore[misc]


# --- digits and the minus sign -----------------------------------------------


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("১৯৭১", "bn"),  # Bengali
        ("١٩٧١", "ar"),  # Arabic-Indic
        ("۱۹۷۱", "fa"),  # Extended Arabic-Indic
        ("१९७१", "hi"),  # Devanagari
        ("๑๙๗๑", "th"),  # Thai
        ("１９７１", "zh"),  # full-width
        ("1971", "en"),
    ],
)
def test_every_decimal_digit_compares_as_its_value(text, lang):
    assert normalize(text, lang) == "1971"
    assert judge(text, ["1971"], lang).correct
    assert judge("1971", [text], lang).correct


def test_digits_in_context():
    assert judge("সালটি ছিল ১৯৭১।", ["1971"], "bn").correct
    assert judge("عام ١٩٧١", ["1971"], "ar").correct
    assert tokenize("พ.ศ. ๒๕๐๐", "th") == ["พ", "ศ", "2500"]  # Thai digits stay one run
    assert not contains("১৯৭১", "৭", "bn")  # still token-boundary aware


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-5", "-5"),
        ("\u22125", "-5"),  # MINUS SIGN
        ("It was -5 degrees", "it was -5 degrees"),
        ("(−5)", "-5"),  # after an opening bracket
        ("«-5»", "-5"),  # after an opening quote
        ("x-5", "x5"),  # inside a token: punctuation
        ("1990-1995", "19901995"),
        ("1990 - 1995", "1990 1995"),  # a dash between spaces is not a sign
        ("- 5", "5"),
        ("-x", "x"),
    ],
)
def test_a_leading_minus_of_a_number_is_kept(text, expected):
    assert normalize(text, "en") == expected


def test_minus_five_is_not_five():
    assert not judge("-5", ["5"], "en").contains
    assert not judge("5", ["-5"], "en").contains
    assert judge("−5 °C", ["-5 °C"], "de").correct
    assert judge("Die Temperatur lag bei -5 Grad", ["-5"], "de").correct


# --- script rules --------------------------------------------------------------


@pytest.mark.parametrize(
    "prediction", ["ΣΟΦΟΚΛΗΣ", "σοφοκλης", "Σοφοκλής", "ΣΟΦΟΚΛΉΣ", "ο Σοφοκλης."]
)
def test_greek_is_compared_without_accents_and_final_sigma(prediction):
    assert judge(prediction, ["Σοφοκλής"], "el").correct


def test_greek_rules():
    assert normalize("Σοφοκλής", "el") == normalize("σοφοκλησ", "el") == "σοφοκλησ"
    assert normalize("ς", "el") == "σ"  # casefold folds the final sigma
    assert normalize("Ϊ ϋ ΐ", "el") == "ι υ ι"  # dialytika too
    assert normalize("ἈΘῆναι", "el") == "αθηναι"  # polytonic marks
    assert normalize("Ελλάδα café", "el") == "ελλαδα café"  # only marks on Greek letters
    assert not judge("Σοφοκλής", ["Ευριπίδης"], "el").contains


def test_turkish_dotted_capital_i_matches_i():
    assert normalize("İstanbul", "tr") == "istanbul"
    assert normalize("İstanbul", "en") == "istanbul"  # for every language
    assert judge("istanbul", ["İstanbul"], "tr").correct
    assert judge("İSTANBUL", ["İstanbul"], "tr").correct


@pytest.mark.parametrize("prediction", ["ISPARTA", "Isparta", "ısparta", "İsparta", "isparta"])
def test_turkish_capitalisation_variants_all_match(prediction):
    assert judge(prediction, ["Isparta"], "tr").correct
    assert judge(prediction, ["ISPARTA"], "tr").correct


def test_turkish_dotless_i_inside_words():
    assert normalize("KIRMIZI", "tr") == normalize("kırmızı", "tr") == "kirmizi"


@pytest.mark.parametrize("apostrophe", ["'", "\u2019", "\u02bc", "\u2018"])
def test_apostrophes_split_turkish_suffixes(apostrophe):
    passage_copy = f"1850{apostrophe}den"
    assert tokenize(passage_copy, "tr") == ["1850", "den"]
    assert judge(passage_copy, ["1850"], "tr").correct
    assert judge(f"Ankara{apostrophe}da", ["Ankara"], "tr").correct


def test_apostrophes_in_english_and_french():
    # Intended: the possessive contains the name (documented in the module docstring).
    assert judge("Newton's", ["Newton"], "en").correct
    assert judge("Newton's laws", ["Newton's laws"], "en").exact_match
    assert normalize("don't", "en") == "don t"
    assert judge("l'Europe", ["Europe"], "fr").correct
    assert not judge("Newtons", ["Newton"], "en").contains


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("Bucureşti", "București"),  # cedilla vs comma below
        ("București", "Bucureşti"),
        ("BUCUREŞTI", "București"),
        ("Ţara", "Țara"),
        ("Timişoara", "Timișoara"),
    ],
)
def test_romanian_cedilla_equals_comma_below(prediction, gold):
    assert judge(prediction, [gold], "ro").correct


def test_romanian_fold_leaves_turkish_s_cedilla():
    assert normalize("Ș ș Ț ț", "ro") == "ş ş ţ ţ"
    assert normalize("şehir", "tr") == "şehir"


@pytest.mark.parametrize("mark", ["\u200e", "\u200f", "\u2060", "\u00ad", "\u202b"])
def test_invisible_format_characters_are_removed(mark):
    assert normalize(f"Pa{mark}ris", "fr") == "paris"
    assert normalize(f"{mark}-5", "en") == "-5"  # invisible for the minus rule too


def test_zero_width_space_and_bom_separate_words():
    assert normalize("\ufeffİstanbul", "tr") == "istanbul"
    assert tokenize("a\u200bb", "de") == ["a", "b"]


def test_held_out_xquad_shapes():
    """Shapes from XQuAD el/tr that the judge got wrong before these rules."""
    assert judge("ΣΟΦΟΚΛΗΣ", ["Σοφοκλής"], "el", question="Ποιος έγραψε την Αντιγόνη;").correct
    passage = "\ufeffKurum 1850'den beri İstanbul'da faaliyet gösteriyor."
    assert judge("1850'den", ["1850"], "tr", passage=passage).correct
    assert judge("istanbul'da", ["İstanbul"], "tr", passage=passage).correct


# --- named options, hedge and repeat (open) ------------------------------------------


def test_named_phrases_do_not_double_count_contained_options():
    tesla, motors = tokenize("Tesla", "en"), tokenize("Tesla Motors", "en")
    assert named_phrases(tokenize("Tesla Motors", "en"), [tesla, motors]) == [False, True]
    assert named_phrases(tokenize("Tesla and Tesla Motors", "en"), [tesla, motors]) == [True, True]
    assert named_phrases(tokenize("Tesla", "en"), [tesla, motors]) == [True, False]
    assert named_phrases(tokenize("anything", "en"), [[], tesla]) == [False, False]
    bj, pku = tokenize("北京", "zh"), tokenize("北京大学", "zh")
    assert named_phrases(tokenize("北京大学", "zh"), [bj, pku]) == [False, True]


OPTS = ["1427", "1432", "1500", "1600"]


@pytest.mark.parametrize(
    ("prediction", "lang", "gold", "options"),
    [
        ("1432 or 1427", "en", "1427", OPTS),
        ("1427 oder 1432", "de", "1427", OPTS),
        ("北京或上海", "zh", "北京", ["上海", "北京", "广州", "天津"]),
        ("กรุงเทพหรือเชียงใหม่", "th", "กรุงเทพ", ["เชียงใหม่", "กรุงเทพ", "ภูเก็ต", "ขอนแก่น"]),
        ("১৪২৭ বা ১৪৩২", "bn", "1427", OPTS),
    ],
)
def test_gold_with_another_option_is_a_hedge(prediction, lang, gold, options):
    j = judge(prediction, [gold], lang, options=options)
    assert j.contains and j.hedge and not j.correct
    assert j.options_named == 2 and j.pred_option is None
    assert not judge(
        prediction, [gold], lang
    ).hedge  # without options there is nothing to hedge with


def test_hedge_needs_the_gold_and_a_non_gold_option():
    j = judge("1427", ["1427"], "en", options=OPTS)
    assert j.correct and not j.hedge and j.options_named == 1
    j = judge("1432", ["1427"], "en", options=OPTS)  # just wrong
    assert not j.contains and not j.hedge and j.options_named == 1
    # 1999 is not an option: no hedge, but an alternative offered beside the gold (uncertain:
    # wrong in the lower bound, right in the upper one)
    j = judge("1427 or 1999", ["1427"], "en", options=OPTS)
    assert not j.hedge and j.uncertain and not j.correct and j.correct_upper
    # An alternative gold is not "another option".
    j = judge(
        "Denver Broncos or the Broncos",
        ["Denver Broncos", "Broncos"],
        "en",
        options=["Denver Broncos", "Carolina Panthers", "Seattle", "1999"],
    )
    assert not j.hedge and j.correct
    # A distractor inside the gold's span is not named.
    j = judge(
        "Tesla Motors", ["Tesla Motors"], "en", options=["Tesla Motors", "Tesla", "Edison", "1901"]
    )
    assert not j.hedge and j.correct and j.options_named == 1
    # ... but a longer distractor that contains the gold names the distractor.
    j = judge("Tesla Motors", ["Tesla"], "en", options=["Tesla", "Tesla Motors", "Edison", "1901"])
    assert j.contains and j.hedge and not j.correct


def test_empty_prediction_with_options_names_none():
    j = judge("", ["1427"], "en", options=OPTS)
    assert not j.correct and j.options_named == 0


@pytest.mark.parametrize(
    ("prediction", "gold", "lang"),
    [
        ("1427 1427 1427 1427 1427 1427", "1427", "en"),
        ("1427, 1427, 1427", "1427", "en"),
        ("1427 1427", "1427", "en"),
        ("Paris Paris", "Paris", "fr"),
        ("New York New York", "New York", "en"),
        ("北京北京", "北京", "zh"),
        ("১৯৭১ 1971", "1971", "bn"),
    ],
)
def test_gold_repeated_is_degenerate(prediction, gold, lang):
    j = judge(prediction, [gold], lang)
    assert j.contains and j.repeat and not j.correct


def test_repeat_needs_nothing_but_copies_of_a_gold():
    assert not judge("1427", ["1427"], "en").repeat
    assert not judge("In 1427 and 1427", ["1427"], "en").repeat  # other words: not a pure repeat
    # A gold that is itself a repetition is an exact match, not a repeat.
    j = judge("Bora Bora", ["Bora", "Bora Bora"], "en")
    assert j.exact_match and not j.repeat and j.correct
    assert not judge(
        "1427 1427 1427 1427 1427 1427 1427", ["1427"], "en"
    ).correct  # too_long as well


# --- candidates ----------------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    [
        "A",
        "A.",
        "(A)",
        "A)",
        "A:",
        "[A]",
        "a",
        "(a)",
        "A: 1427",
        "A. 1427",
        "(A) 1427",
        "A) 1427",
        "1427",
        "The answer is 1427",
        "Ａ",
        "（Ａ）",
        "Ａ．１４２７",
        "\u0391",
        "\u0410",
        "(\u0410)",
    ],  # Greek and Cyrillic capital A
)
def test_candidates_naming_the_gold_alone_is_correct(output):
    j = judge_candidates(output, OPTS, 0, "en")
    assert j.correct and j.options_named == 1 and j.pred_option == 0


@pytest.mark.parametrize(
    ("letter", "index"),
    [
        ("\u0392", 1),
        ("\u0412", 1),
        ("\u0421", 2),
        ("\u0395", 4),
        ("\u0415", 4),
        ("\u0397", 7),
        ("\u041d", 7),
    ],
)
def test_candidates_lookalike_capitals(letter, index):
    options = [f"o{k}" for k in range(8)]
    assert option_label(letter, 8) == (index, "")
    assert option_label(f"{letter}. o{index}", 8) == (index, f"o{index}")
    assert judge_candidates(letter, options, index, "ru").correct


def test_candidates_labels_beyond_the_options_are_not_labels():
    assert option_label("E", 4) == (None, "E")
    assert option_label("An answer", 4) == (None, "An answer")
    assert option_label("A cat", 4) == (None, "A cat")
    assert option_label("e.g. 1427", 8) == (None, "e.g. 1427")
    j = judge_candidates("E", OPTS, 0, "en")
    assert not j.correct and j.options_named == 0 and j.pred_option is None


def test_candidates_listing_every_option_is_wrong():
    j = judge_candidates("1500, 1427, 1600, 1700", ["1427", "1500", "1600", "1700"], 0, "en")
    assert j.contains and not j.correct
    assert j.options_named == 4 and j.pred_option is None and j.hedge


@pytest.mark.parametrize(
    ("output", "named", "pred"),
    [
        ("1427 or 1432", 2, None),
        ("B. 1427", 2, None),  # label and text disagree
        ("A. 1432", 2, None),
        ("A, B", 0, None),  # two labels are not a label: nothing named
        ("1432", 1, 1),
        ("B", 1, 1),
        ("Somewhere else", 0, None),
    ],
)
def test_candidates_other_answers_are_wrong(output, named, pred):
    j = judge_candidates(output, OPTS, 0, "en")
    assert not j.correct and j.options_named == named and j.pred_option == pred


def test_candidates_label_with_text_that_is_not_its_option():
    j = judge_candidates("A. Talbach", OPTS, 0, "en")
    assert j.pred_option == 0 and j.options_named == 1 and not j.contains and not j.correct
    assert j.judged == "Talbach"


def test_candidates_bare_label_judges_the_option_text():
    j = judge_candidates("(C)", OPTS, 2, "en")
    assert j.judged == "1500" and j.exact_match and j.correct and not j.echo and not j.too_long


def test_candidates_repeat_and_length():
    j = judge_candidates("1427 1427 1427", OPTS, 0, "en")
    assert j.repeat and j.pred_option == 0 and j.options_named == 1 and not j.correct
    j = judge_candidates("1432 1432", OPTS, 0, "en")
    assert j.repeat and j.pred_option == 1 and not j.correct
    j = judge_candidates("well it could be something like the number 1427 I think", OPTS, 0, "en")
    assert j.too_long and j.pred_option == 0 and not j.correct


def test_candidates_tesla_is_not_double_counted():
    options = ["Tesla", "Tesla Motors", "Edison", "Westinghouse"]
    j = judge_candidates("Tesla Motors", options, 1, "en")
    assert j.correct and j.options_named == 1 and j.pred_option == 1
    j = judge_candidates("Tesla Motors", options, 0, "en")
    assert not j.correct and j.pred_option == 1
    j = judge_candidates("Tesla or Tesla Motors", options, 0, "en")
    assert not j.correct and j.options_named == 2 and j.hedge


def test_candidates_bullets_style_counts_only_text():
    j = judge_candidates("A", OPTS, 0, "en", letters=False)
    assert not j.correct and j.options_named == 0 and j.pred_option is None
    j = judge_candidates("- 1427", OPTS, 0, "en", letters=False)
    assert j.correct and j.pred_option == 0
    j = judge_candidates("A. 1427", OPTS, 0, "en", letters=False)  # "a" is just a word here
    assert j.correct and j.options_named == 1


@pytest.mark.parametrize(
    ("output", "options", "gold", "lang", "correct"),
    [
        ("Der Mellensee", ["Talbach", "Mellensee", "Hecht", "Brennick"], 1, "de", True),
        ("B. Mellensee", ["Talbach", "Mellensee", "Hecht", "Brennick"], 1, "de", True),
        ("Mellensee und Talbach", ["Talbach", "Mellensee", "Hecht", "Brennick"], 1, "de", False),
        ("北京", ["上海", "北京", "广州", "天津"], 1, "zh", True),
        ("答案是北京。", ["上海", "北京", "广州", "天津"], 1, "zh", True),
        ("北京、上海", ["上海", "北京", "广州", "天津"], 1, "zh", False),
        ("北京大学", ["北京", "北京大学", "清华大学", "南开大学"], 1, "zh", True),
        ("กรุงเทพ", ["เชียงใหม่", "กรุงเทพ", "ภูเก็ต", "ขอนแก่น"], 1, "th", True),
        ("๑๙๗๑", ["1971", "1972", "1980", "1990"], 0, "th", True),
        ("১৯৭১", ["1971", "1972", "1980", "1990"], 0, "bn", True),
        ("Β", ["Αθήνα", "Σοφοκλής", "Σπάρτη", "Θήβα"], 1, "el", True),
        ("ΣΟΦΟΚΛΗΣ", ["Αθήνα", "Σοφοκλής", "Σπάρτη", "Θήβα"], 1, "el", True),
        ("C) İstanbul", ["Ankara", "İzmir", "İstanbul", "Bursa"], 2, "tr", True),
        ("ISTANBUL", ["Ankara", "İzmir", "İstanbul", "Bursa"], 2, "tr", True),
        ("Timişoara", ["Cluj", "Timișoara", "Iași", "Arad"], 1, "ro", True),
    ],
)
def test_candidates_across_languages(output, options, gold, lang, correct):
    assert judge_candidates(output, options, gold, lang).correct is correct


def test_candidates_empty_output_and_bad_gold_index():
    j = judge_candidates("", OPTS, 0, "en")
    assert not j.correct and j.options_named == 0 and j.pred_option is None
    with pytest.raises(ValueError, match="gold_option"):
        judge_candidates("A", OPTS, 4, "en")


def test_candidates_question_echo():
    q = "Which year, 1427 or 1432, did the siege start?"
    j = judge_candidates(
        "Which year, 1427 or 1432, did the siege start? 1427", OPTS, 0, "en", question=q
    )
    assert j.echo and not j.correct


# --- the judge command -----------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmark_illusion", "judge", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_candidates_prints_every_flag():
    p = run_cli(
        "--lang",
        "en",
        "--format",
        "candidates",
        "--gold",
        "1427",
        "--option",
        "1427",
        "--option",
        "1500",
        "--option",
        "1600",
        "--option",
        "1700",
        "1500, 1427, 1600, 1700",
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["correct"] is False and out["options_named"] == 4 and out["hedge"] is True
    assert out["pred_option"] is None and out["gold_option"] == 0
    for key in (
        "exact_match",
        "f1",
        "contains",
        "echo",
        "too_long",
        "repeat",
        "answer_norm",
        "judged",
    ):
        assert key in out
    assert out["answer_norm"] == "1500 1427 1600 1700"


def test_cli_open_in_process_and_light(capsys):
    code = (
        "import sys, json\n"
        "from benchmark_illusion.__main__ import main\n"
        "rc = main(['judge', '--lang', 'tr', '--gold', '1850', \"1850'den\"])\n"
        "print(json.dumps({'rc': rc, "
        "'heavy': [m for m in ('torch', 'polars', 'duckdb') if m in sys.modules]}))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    verdict, meta = (json.loads(line) for line in p.stdout.splitlines())
    assert verdict["correct"] is True and verdict["answer_norm"] == "1850 den"
    assert meta == {"rc": 0, "heavy": []}


def test_cli_main_open_with_options(capsys):
    from benchmark_illusion.__main__ import main

    assert (
        main(
            [
                "judge",
                "--lang",
                "en",
                "--gold",
                "1427",
                "--option",
                "1427",
                "--option",
                "1432",
                "1432 or 1427",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["hedge"] is True and out["correct"] is False and out["options_named"] == 2
    assert main(["judge", "--lang", "en", "--gold", "-5", "-5"]) == 0
    assert json.loads(capsys.readouterr().out)["correct"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lang", "en", "Paris"], "--gold"),
        (["--gold", "Paris", "Paris"], "--lang"),
        (
            ["--lang", "en", "--gold", "1427", "--format", "candidates", "--option", "1427", "A"],
            "--option",
        ),
        (
            [
                "--lang",
                "en",
                "--gold",
                "9",
                "--format",
                "candidates",
                "--option",
                "1427",
                "--option",
                "1500",
                "A",
            ],
            "--gold",
        ),
        (["--lang", "en", "--gold", "...", "Paris"], "--gold"),
        (["--lang", "en", "--gold", "Paris", "--format", "mc", "Paris"], "--format"),
        (
            ["--lang", "en", "--gold", "Paris", "--max-length-factor", "0", "Paris"],
            "--max-length-factor",
        ),
        (
            [
                "--lang",
                "en",
                "--gold",
                "1",
                "--format",
                "candidates",
                *sum((["--option", str(k)] for k in range(9)), []),
                "A",
            ],
            "--option",
        ),
    ],
)
def test_cli_bad_arguments_exit_2_naming_the_argument(args, message):
    p = run_cli(*args)
    assert p.returncode == 2
    assert message in p.stderr and p.stdout == ""


@pytest.mark.parametrize("output", ["B、北京", "B。北京", "B、", "（B）北京", "B：北京", "B.北京"])
def test_candidates_cjk_label_punctuation(output):
    assert judge_candidates(output, ["上海", "北京", "广州", "天津"], 1, "zh").correct


def test_label_letters_are_the_prompt_letters():
    from benchmark_illusion.evaluation.candidates import LABEL_LETTERS
    from benchmark_illusion.evaluation.prompts import LETTERS

    assert LABEL_LETTERS == LETTERS == "ABCDEFGH"


def test_restating_the_question_subject_is_not_a_hedge():
    """Passage-span distractors can be the question's subject; a declarative answer names it."""
    from benchmark_illusion.evaluation.candidates import judge_candidates
    from benchmark_illusion.evaluation.judge import judge

    q = "Which river does the Pellan Bridge cross?"
    options = ["Pellan Bridge", "grey stone", "Sorr River", "1931"]
    out = "The Pellan Bridge crosses the Sorr River between Castlebrook and Milford."
    j = judge(out, ["Sorr River"], "en", question=q, options=options)
    assert j.correct and not j.hedge and j.options_named == 1
    c = judge_candidates(out, options, 2, "en", question=q, letters=False)
    assert c.correct and c.pred_option == 2 and c.options_named == 1
    # a real hedge with an option that is not in the question stays wrong
    j = judge("Sorr River or grey stone", ["Sorr River"], "en", question=q, options=options)
    assert j.hedge and not j.correct and j.options_named == 2
    # the question's subject alone is still an answer: it names that option
    c = judge_candidates("Pellan Bridge", options, 2, "en", question=q, letters=False)
    assert c.pred_option == 0 and not c.correct
    # German and Chinese restatements
    j = judge(
        "Die Alte Brücke führt über die Auler.",
        ["Auler"],
        "de",
        question="Über welchen Fluss führt die Alte Brücke?",
        options=["Alte Brücke", "1742", "5", "Auler"],
    )
    assert not j.hedge and j.options_named == 1  # (too long for a one-token gold, but no hedge)
    j = judge(
        "长江大桥跨越长江",
        ["长江"],
        "zh",
        question="长江大桥跨越哪条河？",
        options=["长江大桥", "长江", "1957", "武汉"],
    )
    assert j.contains


def test_a_distractor_overlapping_the_gold_as_written_is_not_a_hedge():
    from benchmark_illusion.evaluation.judge import judge

    options = ["of grey", "Sorr River", "grey stone", "1931"]
    j = judge(
        "The Pellan Bridge is made of grey stone.",
        ["grey stone"],
        "en",
        question="What is the Pellan Bridge made of?",
        options=options,
    )
    assert j.correct and not j.hedge and j.options_named == 1
    # written apart from the gold, the same distractor is a hedge
    j = judge("grey stone, or of grey", ["grey stone"], "en", options=options)
    assert j.hedge and not j.correct


# The sentence-tolerant verdict (correct_sentence): one sentence that states the gold, names no
# other option, copies neither the question nor the passage, within question + gold + slack
# tokens. (lang, question, gold, options, sentence answer)
SENTENCES = [
    (
        "en",
        "What is the nearest town to Lake Varrow?",
        "Brennick",
        ["Brennick", "Mellen", "Sorr", "Talbach"],
        "The nearest town to Lake Vary is Brennick.",
    ),
    (
        "de",
        "Welche Stadt liegt am nächsten am Varrowsee?",
        "Brennick",
        ["Brennick", "Mellen", "Sorr", "Talbach"],
        "Die Stadt Brennick liegt am nächsten am Varrowsee.",
    ),
    (
        "zh",
        "谁第一个登上了埃尔布林山的山顶？",
        "安娜",
        ["安娜", "玛丽", "彼得", "约翰"],
        "第一个登上埃尔布林山山顶的人是安娜。",
    ),
    (
        "th",
        "เมืองที่ใกล้ทะเลสาบวาร์โรว์ที่สุดคือเมืองอะไร",
        "เบรนนิค",
        ["เบรนนิค", "เมลเลน", "ซอร์", "ทัลบัค"],
        "เมืองที่ใกล้ทะเลสาบวาร์โรว์ที่สุดคือเบรนนิค",
    ),
    (
        "el",
        "Ποια είναι η πλησιέστερη πόλη στη λίμνη Βάρροου;",
        "Μπρένικ",
        ["Μπρένικ", "Μέλεν", "Σορ", "Τάλμπαχ"],
        "Η πλησιέστερη πόλη στη λίμνη είναι το Μπρένικ.",
    ),
    (
        "tr",
        "Varrow Gölü'ne en yakın kasaba hangisidir?",
        "Brennick",
        ["Brennick", "Mellen", "Sorr", "Talbach"],
        "Varrow Gölü'ne en yakın kasaba Brennick'tir.",
    ),
]


@pytest.mark.parametrize(("lang", "question", "gold", "options", "answer"), SENTENCES)
def test_a_sentence_stating_the_gold_is_correct_sentence_only(
    lang, question, gold, options, answer
):
    v = judge(answer, [gold], lang, question=question, options=options)
    assert v.contains and v.too_long and not v.correct  # the short-answer judge says no
    assert v.correct_sentence and v.sentences == 1
    assert not v.sentence_too_long and not v.sentence_copy


@pytest.mark.parametrize(("lang", "question", "gold", "options", "answer"), SENTENCES)
def test_a_sentence_that_also_names_a_distractor_is_rejected(lang, question, gold, options, answer):
    # the same sentence with another option appended: it offers two answers
    sep = "、" if lang == "zh" else (" " if lang == "th" else ", ")
    hedged = answer.rstrip(".。") + sep + options[1]
    v = judge(hedged, [gold], lang, question=question, options=options)
    assert v.hedge and not v.correct_sentence


@pytest.mark.parametrize(("lang", "question", "gold", "options", "answer"), SENTENCES)
def test_a_first_sentence_counts_whatever_follows_but_a_ramble_does_not(
    lang, question, gold, options, answer
):
    end = {"zh": "。", "th": " "}.get(lang, " ")
    two = answer + end + answer.replace(gold, "").strip()
    v = judge(two, [gold], lang, question=question, options=options)
    # Thai writes no sentence ends: there the two run together into one over-long sentence
    assert v.correct_sentence == (lang != "th") and not v.correct
    # the second sentence naming another option does not undo the first one's answer
    other = answer + end + answer.replace(gold, options[1])
    assert judge(other, [gold], lang, question=question, options=options).correct_sentence == (
        lang != "th"
    )
    # a first sentence without the gold is no sentence answer, whatever follows
    late = answer.replace(gold, options[1]) + end + answer
    assert not judge(late, [gold], lang, question=question, options=options).correct_sentence
    ramble = answer.rstrip(".。") + " " + " ".join(["und", "so", "weiter"] * 6)
    v = judge(ramble, [gold], lang, question=question, options=options)
    assert v.sentence_too_long and not v.correct_sentence


def test_sentence_count_rules():
    from benchmark_illusion.evaluation.judge import sentence_count

    assert sentence_count("It is 1.5 km long.") == 1  # a decimal point ends nothing
    assert sentence_count("Mt. Elbrin was climbed by J. Strobel.") == 1  # abbreviations
    assert sentence_count("It was 1427. Then came the flood.") == 2
    assert sentence_count("北京。上海是最大的城市。") == 2  # no space after 。
    assert sentence_count("答案是北京。") == 1
    assert sentence_count("क्या यह सही है? हाँ, यह दिल्ली है।") == 2  # Devanagari danda
    assert sentence_count("هل هذا صحيح؟ نعم القاهرة") == 2  # Arabic question mark
    assert sentence_count("...") == 0


def test_a_passage_copy_around_the_gold_is_not_a_sentence_answer():
    passage = "In 1427 the guild of masons built a stone bridge over the Sorr near the old mill."
    question = "When was the bridge built?"
    # copied from the passage, mostly words the question does not ask about
    copy = "In 1427 the guild of masons built a stone bridge."
    v = judge(copy, ["1427"], "en", question=question, passage=passage)
    assert v.sentence_copy and not v.correct_sentence
    # a restatement of the question around the gold is an answer
    ok = "The bridge was built in 1427."
    v = judge(ok, ["1427"], "en", question=question, passage=passage)
    assert not v.sentence_copy and v.correct_sentence


def test_sentence_slack_bounds_the_length():
    q, a = (
        "What is the nearest town to Lake Varrow?",
        "It is Brennick, the nearest town by the lake.",
    )
    # question 7 tokens + gold 1 + slack; the answer has 7 (articles dropped)
    assert judge(
        a, ["Brennick"], "en", question=q, limits=JudgeLimits(sentence_slack=0)
    ).correct_sentence
    long = "It is the little market town of Brennick by the lake of Varrow in the hills."
    assert judge(
        long, ["Brennick"], "en", question=q, limits=JudgeLimits(sentence_slack=4)
    ).sentence_too_long
    assert judge(
        long, ["Brennick"], "en", question=q, limits=JudgeLimits(sentence_slack=20)
    ).correct_sentence
    # what follows the clause that states the gold adds to the answer and is not counted
    more = "It is Brennick, the nearest little market town by the lake of Varrow in the hills."
    v = judge(more, ["Brennick"], "en", question=q, limits=JudgeLimits(sentence_slack=4))
    assert v.correct_sentence and not v.sentence_too_long


def test_cli_prints_both_verdicts_and_their_flags():
    args = (
        "--lang",
        "en",
        "--gold",
        "Brennick",
        "--question",
        "What is the nearest town to Lake Varrow?",
    )
    out = json.loads(run_cli(*args, "The nearest town to Lake Vary is Brennick.").stdout)
    assert out["correct"] is False and out["too_long"] is True
    assert out["correct_sentence"] is True and out["sentences"] == 1
    assert out["sentence_too_long"] is False and out["sentence_copy"] is False
    # a tighter slack turns the sentence down, naming why
    out = json.loads(
        run_cli(
            *args,
            "--sentence-slack",
            "0",
            "The nearest small town to the big old lake is Brennick.",
        ).stdout
    )
    assert out["correct_sentence"] is False and out["sentence_too_long"] is True
    assert run_cli(*args, "--sentence-slack", "-1", "Brennick").returncode == 2


def test_echo_share_and_passage_copy_run_at_their_boundaries():
    """Rule b at 60 % (the documented share): 3 question tokens of a 5-token answer echo the
    question (3 >= 0.6 x 5), of a 6-token answer they do not (3 < 3.6). Rule c: an answer sharing
    max_run + 1 consecutive passage tokens copies it, max_run tokens do not. Either threshold
    moved by one step changes one of these verdicts."""
    from benchmark_illusion.evaluation.judge import _passage_copy, _question_echo

    question = ["which", "river", "runs", "through", "paris"]
    gold = [["paris"]]  # the gold is in the question: the condition of rule b
    assert _question_echo(["which", "river", "paris", "x1", "x2"], gold, question)
    assert not _question_echo(["which", "river", "paris", "x1", "x2", "x3"], gold, question)
    # at 40 % three of seven would echo; at 75 % three of five would not
    assert not _question_echo(["which", "river", "paris", "a", "b", "c", "d"], gold, question)

    passage = "the seine flows through paris and into the english channel".split()
    max_run = 4
    assert _passage_copy("x seine flows through paris and".split(), passage, max_run)  # 5 shared
    assert not _passage_copy("x flows through paris and y".split(), passage, max_run)  # 4


# --- the passage copy rule (c) at its boundaries --------------------------------------------------

# 9 tokens; the gold "Paris" (1 token) allows 3 * 1 + 3 = 6 tokens, so a passage copy is a
# shared run of 7 or more
HARBOUR = "Boats leave Rahway harbour early then sail past Paris"


def test_a_passage_copy_is_a_shared_run_of_more_than_the_length_limit():
    # the passage's last 7 tokens, exactly one more than the limit: a copy, found at the very
    # end of the passage
    copy7 = "harbour early then sail past Paris"
    pred = "Rahway " + copy7
    assert len(tokenize(pred, "en")) == 3 * 1 + 3 + 1
    j = judge(pred, ["Paris"], "en", passage=HARBOUR)
    assert j.too_long and j.echo and not j.correct
    # 6 shared tokens and one of its own: too long, but no copied stretch
    j = judge("Lisbon " + copy7, ["Paris"], "en", passage=HARBOUR)
    assert j.too_long and not j.echo
    # a passage of exactly 7 tokens, copied whole
    short = "Rahway " + copy7
    assert judge(short, ["Paris"], "en", passage=short).echo
    # a passage shorter than 7 tokens cannot hold a copy of 7
    j = judge("one two three four five six seven Paris", ["Paris"], "en", passage=copy7)
    assert j.too_long and not j.echo


# --- an option next to the gold, and an option around the gold ----------------------------------


def test_an_option_next_to_the_gold_is_named_and_one_around_it_too():
    """_inside_gold: only an occurrence that partly overlaps a gold is part of it. "made of" ends
    where the gold "grey stone" starts (no shared token): named, a hedge. "of grey stone" covers
    the whole gold, ending where it ends: named (module docstring, "Tesla Motors" around
    "Tesla"), so a hedge as well."""
    options = ["grey stone", "made of", "red brick", "oak"]
    j = judge("made of grey stone", ["grey stone"], "en", options=options)
    assert j.contains and j.hedge and j.options_named == 2 and not j.correct
    options = ["grey stone", "of grey stone", "red brick", "oak"]
    j = judge("of grey stone", ["grey stone"], "en", options=options)
    assert j.contains and j.hedge and j.options_named == 1 and not j.correct


def test_a_phrase_ending_a_longer_option_is_not_named():
    """Naming an option: "Motors" occurs only inside "Tesla Motors" (at its end, not its start),
    so only the longer option is named; written apart, both are."""
    tesla = [["motors"], ["tesla", "motors"]]
    assert named_phrases(tokenize("Tesla Motors", "en"), tesla) == [False, True]
    assert named_phrases(tokenize("Motors and Tesla Motors", "en"), tesla) == [True, True]


def test_an_option_without_tokens_is_never_a_repeat():
    # an option that normalises to nothing ("...") can be repeated by nothing
    j = judge_candidates("The answer is 1427", ["...", "1427", "1500", "1600"], 1, "en")
    assert j.correct and not j.repeat


def test_a_single_copy_of_a_gold_is_not_a_repeat():
    """`is_repeat` (module docstring, repeat): two or more copies, and nothing else."""
    from benchmark_illusion.evaluation.judge import is_repeat

    gold = ["new", "york"]
    assert not is_repeat(gold, gold)
    assert is_repeat(gold * 2, gold) and is_repeat(gold * 3, gold)
    assert not is_repeat(gold * 2 + ["city"], gold) and not is_repeat(["new"] * 4, gold)
    assert not is_repeat(gold, [])


def test_without_a_question_or_a_passage_no_echo_rule_applies():
    """The defaults question="" and passage="": no question to copy, no passage to copy from,
    whatever the words (a placeholder gold here) and however tight the length limit."""
    j = judge("Xxxx xxxx xxxx", ["xxxx"], "en")
    assert j.contains and not j.echo
    j = judge("Xxxx", ["xxxx"], "en", limits=JudgeLimits(max_length_factor=0.5, max_length_slack=0))
    assert j.too_long and not j.echo


def test_judge_defaults_are_the_documented_ones():
    """No question and no passage unless given; too_long at 3 * G + 3 tokens; sentence slack 4
    (module docstring); `candidates` reads letter labels by default."""
    import inspect

    def defaults(f):
        return {
            name: p.default
            for name, p in inspect.signature(f).parameters.items()
            if p.default is not inspect.Parameter.empty
        }

    common = {"question": "", "passage": "", "limits": JudgeLimits()}
    assert defaults(judge) == {**common, "options": None, "rivals": None}
    assert defaults(judge_candidates) == {**common, "letters": True}
    assert JudgeLimits() == JudgeLimits(max_length_factor=3.0, max_length_slack=3, sentence_slack=4)


# --- which gold sets the limits, and the sentence verdict at its boundaries ----------------------

Q_BOATS = "When do boats sail?"  # 4 tokens


def test_the_limits_use_the_longest_contained_gold():
    """G is the longest gold the prediction contains: with "city of Paris" (3 tokens) contained
    beside "Paris", 10 tokens are within 3 * 3 + 3 = 12 and within Q + G + 4 = 4 + 3 + 4 = 11
    (with G = 1 they would be over both, 6 and 9)."""
    pred = "they sail to the old city of Paris every single day"
    assert len(tokenize(pred, "en")) == 10
    j = judge(pred, ["Paris", "city of Paris"], "en", question=Q_BOATS)
    assert not j.too_long and not j.sentence_too_long and j.correct and j.correct_sentence


def test_a_sentence_of_exactly_question_plus_gold_plus_slack_tokens_is_not_too_long():
    pred = "they sail from the harbour to Paris every single day"  # Q + G + 4 = 4 + 1 + 4 = 9
    assert len(tokenize(pred, "en")) == 9
    j = judge(pred, ["Paris"], "en", question=Q_BOATS)
    assert not j.sentence_too_long and j.correct_sentence
    j = judge("so " + pred, ["Paris"], "en", question=Q_BOATS)
    assert j.sentence_too_long and not j.correct_sentence


def test_sentence_copy_at_its_boundaries():
    """A passage copy around the gold needs at least G + 2 tokens, and fewer than half of the
    tokens outside the gold in the question (module docstring, sentence_copy)."""
    where = "Where do the boats go?"  # none of "sail", "past"
    # G + 1 = 2 tokens of the passage: too short to be a copy
    assert (
        judge("past Paris", ["Paris"], "en", question=where, passage=HARBOUR).sentence_copy is False
    )
    # G + 2 = 3 tokens, "sail past" not in the question: a copy
    assert judge("sail past Paris", ["Paris"], "en", question=where, passage=HARBOUR).sentence_copy
    # the same with "sail" in the question: 1 of the 2 tokens outside the gold, not fewer than
    # half: no copy
    j = judge("sail past Paris", ["Paris"], "en", question=Q_BOATS, passage=HARBOUR)
    assert j.sentence_copy is False
    # a stretch of the passage without the gold is no copy around it (and no error)
    j = judge("Boats leave Rahway", ["Paris"], "en", question=where, passage=HARBOUR)
    assert j.sentence_copy is False and not j.correct_sentence


def test_flags_are_booleans_and_judged_is_the_first_line():
    j = judge("Paris\nLondon", ["Paris"], "en")
    assert j.judged == "Paris" and j.hedge is False and j.sentence_copy is False
    # no usable gold: the all-false verdict, still on the judged line
    assert judge("Paris", [], "en").judged == "Paris"


def test_a_correct_short_answer_is_correct_sentence_in_two_sentences_too():
    """correct_sentence is true whenever correct is, although "Paris. France." is two sentences."""
    j = judge("Paris. France.", ["Paris"], "en")
    assert j.correct and j.sentences == 2 and j.correct_sentence is True


def test_a_question_of_exactly_three_tokens_copied_is_an_echo():
    # rule a: Q has at least 3 tokens; the gold is not in the question, so only rule a applies
    j = judge("Who founded Rahway? Tesla", ["Tesla"], "en", question="Who founded Rahway?")
    assert j.contains and j.echo and not j.correct


def test_sentence_count_after_a_sentence_end():
    # "... France" is a sentence of its own although its "..." follows "Paris." directly
    assert sentence_count("Paris. ... France") == 2
    # "。" ends a sentence with nothing between it and the next one's first character
    assert sentence_count("好。是。对") == 3
