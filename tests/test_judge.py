"""Tests for benchmark_illusion.judge: normalisation, tokens, metrics and the echo/length rules."""

from __future__ import annotations

import dataclasses

import pytest

from benchmark_illusion.judge import (
    Judgement,
    contains,
    exact_match,
    first_line,
    judge,
    normalize,
    token_f1,
    tokenize,
)

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
    j = judge("What is the capital of France? Paris", ["Paris"], "en", question=Q_FR, passage=PASSAGE_FR)
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
    pred = "well I think that it might perhaps be Paris or somewhere near there"
    j = judge(pred, ["Paris"], "en", question=Q_FR, passage=PASSAGE_FR)
    assert j.contains and j.too_long and not j.echo and not j.correct


def test_length_limit_boundary():
    # Gold "New York" has 2 tokens: limit 3 * 2 + 3 = 9 tokens.
    nine = "x b c d e f g New York"  # 9 tokens (no English articles to drop)
    assert len(tokenize(nine, "en")) == 9
    assert not judge(nine, ["New York"], "en").too_long
    assert judge("z " + nine, ["New York"], "en").too_long
    assert judge("z " + nine, ["New York"], "en", max_length_slack=4).correct


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
    j = judge("Paris\nLondon is the capital of England, and the question was about France", ["Paris"], "en", question=Q_FR)
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
