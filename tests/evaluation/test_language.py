"""The judge's and the distractors' language resources (language.py), on real text in
several scripts: token positions, number words, stems, word breaks, function words and the
negation / alternative cues."""

from __future__ import annotations

import pytest

from benchmark_illusion import language
from benchmark_illusion.evaluation.judge import judge
from benchmark_illusion.textnorm import tokenize

LINES = [
    ("en", "It is not Paris, but the U.S. capital, 1,500 km away."),
    ("de", "Die Hauptstadt ist nicht Berlin – es ist Bonn."),
    ("el", "Δεν είναι η Αθήνα· ΣΟΦΟΚΛΗΣ έγραψε 12 τραγωδίες."),
    ("ru", "Это не Москва, а Санкт-Петербург."),
    ("ar", "ليست القاهرة، بل الإسكندرية عام ١٩٧١."),
    ("hi", "यह दिल्ली नहीं है, आगरा है। १९७१ में।"),
    ("th", "ไม่ใช่กรุงเทพ, แต่เป็นเชียงใหม่ ๒๕๖๗"),
    ("zh", "答案不是北京，而是上海。２００８年"),
    ("vi", "Không phải Hà Nội, mà là Huế."),
    ("tr", "İstanbul'da değil, Ankara'dadır."),
    ("fi", "Ei Helsingissä, vaan Turussa."),
]


@pytest.mark.parametrize(("lang", "line"), LINES)
def test_located_tokens_are_the_judges_tokens_with_their_place(lang, line):
    toks = language.located_tokens(line, lang)
    assert toks is not None
    assert [t.text for t in toks] == tokenize(line, lang)
    for t in toks:
        # each token's text is what normalising its characters gives
        assert tokenize(line[t.start : t.end], "und" if lang != "en" else lang)[0].startswith(
            t.text[:1]
        )
    # a comma (or its script's equivalent) starts a new clause
    assert toks[-1].clause > toks[0].clause


def test_clauses_do_not_break_inside_numbers():
    toks = language.located_tokens("It cost 1,500 or 3.5 units", "en")
    assert len({t.clause for t in toks}) == 1


@pytest.mark.parametrize(
    ("lang", "n", "words"),
    [
        ("en", 12, "twelve"),
        ("en", 100, "hundred"),
        ("es", 12, "doce"),
        ("de", 12, "zwölf"),
        ("de", 100, "hundert"),
        ("ru", 12, "двенадцать"),
        ("ar", 12, "اثنا عشر"),
        ("hi", 12, "बारह"),
        ("vi", 12, "mười hai"),
        ("th", 12, "สิบสอง"),
        ("el", 12, "δώδεκα"),
        ("el", 35, "τριάντα πέντε"),
        ("tr", 12, "on iki"),
        ("fi", 12, "kaksitoista"),
        ("zh", 12, "十二"),
        ("zh", 105, "一百零五"),
        ("ro", 12, "douăsprezece"),
    ],
)
def test_number_words_in_each_language(lang, n, words):
    assert words in language.number_words(n, lang)
    # and the judge reads them both ways
    assert judge(words, [str(n)], lang).correct
    assert judge(str(n), [words], lang).correct


def test_number_variants_keep_the_rest_of_the_answer():
    assert ["twelve", "bridges"] in language.number_variants(["12", "bridges"], "en")
    assert ["12"] in language.number_variants(["doce"], "es")
    assert ["12"] in language.number_variants(["十", "二"], "zh")
    assert language.number_variants(["paris"], "en") == []


@pytest.mark.parametrize(
    ("lang", "pred", "gold", "same"),
    [
        ("ru", "москве", "москва", True),
        ("ru", "двенадцати", "двенадцать", True),
        ("ar", "بالقاهرة", "القاهرة", True),
        ("ar", "والقاهرة", "القاهرة", True),
        ("ar", "للقاهرة", "القاهرة", True),
        ("tr", "ankaradir", "ankara", True),  # Ankaradır, dotless ı read as i
        ("tr", "demirci", "demir", False),  # another name
        ("tr", "ankaragucu", "ankara", False),
        ("fi", "helsingissä", "helsinki", True),
        ("fi", "turussa", "turku", True),
        ("fi", "virtasen", "virtanen", True),
        ("el", "αθηνας", "αθηνα", True),
        ("de", "deutschlands", "deutschland", True),
        ("de", "lübecker", "lübeck", False),  # an adjective of another name
        ("hi", "आगरे", "आगरा", True),
        ("es", "carpinteros", "carpintero", True),
        ("ru", "австралия", "австрия", False),
        ("en", "bridges", "bridge", False),  # English matches exactly
    ],
)
def test_stems_match_inflected_forms_not_other_words(lang, pred, gold, same):
    assert language.stems_match(pred, gold, lang) is same


def test_word_breaks_of_chinese_and_thai():
    assert language.word_breaks("答案是北京大学", "zh") == {0, 2, 3, 7}
    assert 3 not in language.word_breaks("ทองแดงเป็นโลหะ", "th")  # ทอง|แดง is one word
    assert language.word_breaks("Paris", "en") is None


def test_function_words_are_words_of_letters_without_numbers():
    en = language.function_words("en")
    assert {"the", "and", "of", "in"} <= en
    assert not any(ch.isdigit() for w in en for ch in w)
    assert "tres" not in language.function_words("es")  # a number is an answer
    assert "und" in language.function_words("de")
    assert language.function_words("th")  # Thai words of several characters
    assert language.function_words("xx") == frozenset()


@pytest.mark.parametrize(
    ("lang", "text", "edge"),
    [
        ("en", "of grey", True),
        ("en", "grey stone", False),
        ("en", "The nearest", True),
        ("en", "opened in", True),
        ("es", "Las semillas están", True),
        ("es", "Costa de Marfil", False),
        ("de", "Josef Anger", False),
        ("zh", "北京的", True),
        ("zh", "北京大学", False),
    ],
)
def test_function_edge(lang, text, edge):
    assert language.function_edge(text, lang) is edge


@pytest.mark.parametrize(
    ("lang", "pred", "gold"),
    [
        ("en", "It is not Paris.", "Paris"),
        ("en", "The capital of France is Lyon, not Paris.", "Paris"),
        ("en", "Paris is not the capital.", "Paris"),
        ("de", "Es ist nicht Berlin.", "Berlin"),
        ("es", "No es Madrid.", "Madrid"),
        ("es", "Santiago no.", "Santiago"),
        ("ru", "Это не Москва.", "Москва"),
        ("zh", "不是北京。", "北京"),
        ("ar", "ليست القاهرة", "القاهرة"),
        ("hi", "यह दिल्ली नहीं है", "दिल्ली"),
        ("vi", "Không phải Hà Nội", "Hà Nội"),
        ("th", "ไม่ใช่กรุงเทพ", "กรุงเทพ"),
        ("el", "Δεν είναι η Αθήνα", "Αθήνα"),
        ("tr", "Ankara değil", "Ankara"),
        ("tr", "Romanı Ayşe Demir yazmadı.", "Ayşe Demir"),
        ("fi", "Se ei ole Helsinki.", "Helsinki"),
    ],
)
def test_negations_in_every_script(lang, pred, gold):
    v = judge(pred, [gold], lang)
    assert v.negated and v.status == "negated" and not v.correct_sentence
    assert not v.correct_upper and not v.correct_sentence_upper  # wrong in both bounds


@pytest.mark.parametrize(
    ("lang", "pred", "gold"),
    [
        ("en", "The capital is Paris, not Lyon.", "Paris"),  # the "not" is Lyon's
        ("en", "Paris, of course.", "Paris"),
        ("de", "Berlin ist die Hauptstadt.", "Berlin"),
        ("el", "Η Αθήνα", "Αθήνα"),  # the article η is no "or" (ή)
        ("zh", "答案是北京。", "北京"),
    ],
)
def test_affirmations_are_not_negated_or_uncertain(lang, pred, gold):
    v = judge(pred, [gold], lang)
    assert v.correct_sentence and not v.negated and not v.uncertain


@pytest.mark.parametrize(
    ("lang", "pred", "gold"),
    [
        ("en", "Paris or Lyon", "Paris"),
        ("en", "maybe Paris", "Paris"),
        ("de", "Berlin oder München", "Berlin"),
        ("es", "Madrid o Sevilla", "Madrid"),
        ("ru", "Москва или Казань", "Москва"),
        ("zh", "北京或上海", "北京"),
        ("el", "Αθήνα ή Πάτρα", "Αθήνα"),
        ("tr", "Ankara veya İzmir", "Ankara"),
        ("th", "เชียงใหม่หรือลำปาง", "เชียงใหม่"),
    ],
)
def test_alternatives_that_are_no_option_are_uncertain(lang, pred, gold):
    v = judge(pred, [gold], lang)
    assert v.uncertain and v.status == "uncertain"
    assert not v.correct and v.correct_upper  # the two bounds differ


def test_an_alternative_that_is_an_option_is_a_hedge_not_uncertain():
    v = judge("Paris or Lyon", ["Paris"], "en", options=["Paris", "Lyon", "Nice", "Metz"])
    assert v.hedge and not v.uncertain and not v.correct_upper


@pytest.mark.parametrize(
    ("lang", "pred", "gold", "whole"),
    [
        ("en", "Paris Hilton", "Paris", False),
        ("en", "New York", "York", False),
        ("en", "Santiago de Compostela", "Santiago", False),
        ("en", "In Paris.", "Paris", True),
        ("en", "It was Tesla.", "Tesla", True),
        ("zh", "北京大学", "北京", False),
        ("zh", "在北京。", "北京", True),
        ("zh", "一共十二个。", "十二", True),  # a number with its classifier
        ("th", "ทองแดง", "ทอง", False),
        ("th", "ทองคำ", "ทองคำ", True),
    ],
)
def test_the_gold_must_stand_as_a_whole_entity(lang, pred, gold, whole):
    v = judge(pred, [gold], lang)
    assert v.correct_sentence is whole
    assert v.longer_entity is not whole
