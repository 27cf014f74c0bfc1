"""Tests for benchmark_illusion.data.items, .answers and .spans: row validation, answer
comparisons, passage spans and item building."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import polars as pl
import pytest

from benchmark_illusion.data.answers import is_numeric, overlaps
from benchmark_illusion.data.items import build_items, validate_rows
from benchmark_illusion.data.loaders import load_raw
from benchmark_illusion.data.spans import split_sentences, text_kind
from benchmark_illusion.language import word_breaks
from benchmark_illusion.textnorm import tokenize

ROOT = Path(__file__).resolve().parents[2]

RAW_SCHEMA = {
    "id": pl.String,
    "lang": pl.String,
    "title": pl.String,
    "context": pl.String,
    "question": pl.String,
    "answers": pl.List(pl.String),
    "answer_starts": pl.List(pl.Int64),
}


def row(id_, lang, context, question, answers, title="t", starts=None):
    if starts is None:
        starts = [context.find(a) if a else -1 for a in answers]
    return {
        "id": id_,
        "lang": lang,
        "title": title,
        "context": context,
        "question": question,
        "answers": answers,
        "answer_starts": starts,
    }


def frame(rows):
    return pl.DataFrame(rows, schema=RAW_SCHEMA)


TESLA = (
    "In 1886 Tesla founded Tesla Electric Light & Manufacturing in Rahway. "
    "The firm installed arc lamps in the city of Rahway."
)
EDISON = "Edison opened the Pearl Street Station in Manhattan in 1882 to serve 59 customers."
NUMBERS = "The bridge is 1500 metres long, opened in 1887, and carries 42 lanes over 12 000 piers."
MOON = "The Moon is Earth's only natural satellite; Apollo 11 landed there in 1969."
PLANTS = "Photosynthesis in plants uses chlorophyll, which absorbs red and blue light."


def english_rows():
    return [
        row("en-01", "en", TESLA, "Who founded the firm?", ["Tesla"]),
        row(
            "en-02",
            "en",
            TESLA,
            "What was the firm called?",
            ["Tesla Electric Light & Manufacturing"],
        ),
        row("en-03", "en", TESLA, "In what year was it founded?", ["1886"]),
        row("en-04", "en", TESLA, "Where was it based?", ["Rahway"]),
        row("en-05", "en", EDISON, "Who opened the station?", ["Edison"]),
        row("en-06", "en", EDISON, "Which station was opened?", ["Pearl Street Station"]),
        row("en-07", "en", EDISON, "Where was the station?", ["Manhattan"]),
        row("en-08", "en", EDISON, "How many customers?", ["59"]),
        row("en-09", "en", NUMBERS, "How long is the bridge in metres?", ["1500"]),
        row("en-10", "en", MOON, "When did Apollo 11 land?", ["1969"]),
        row("en-11", "en", MOON, "What is the Moon?", ["Earth's only natural satellite"]),
        row("en-12", "en", PLANTS, "What absorbs light?", ["chlorophyll"]),
    ]


def german_rows():
    # One numeric item among text items: it must fall back to 'other_kind'.
    return [
        row(
            "de-01",
            "de",
            "Die Zugspitze ist 2962 Meter hoch.",
            "Wie hoch ist die Zugspitze?",
            ["2962"],
        ),
        row("de-02", "de", "Berlin ist die Hauptstadt.", "Was ist die Hauptstadt?", ["Berlin"]),
        row(
            "de-03",
            "de",
            "Der Rhein fließt durch Köln.",
            "Durch welche Stadt fließt der Rhein?",
            ["Köln"],
        ),
        row("de-04", "de", "Goethe schrieb den Faust.", "Wer schrieb den Faust?", ["Goethe"]),
        row(
            "de-05",
            "de",
            "Die Elbe fließt durch Dresden.",
            "Durch welche Stadt fließt die Elbe?",
            ["Dresden"],
        ),
    ]


TOWER = (
    "The tower was finished in 1889 and is 330 metres tall. It had 2 million visitors in 1900 "
    "and 7 lifts."
)
CURIE = (
    "Marie Curie was born in Warsaw. She later moved to Paris, where she met Pierre Curie. "
    "She worked with Henri Becquerel in France."
)
BEES = "Bees make honey from nectar. They collect pollen with their legs and store it in wax cells."


def tydiqa_rows():
    # One question per passage (as in TyDiQA-GoldP): no other question's answer to draw on.
    return [
        row("ty-1", "en", TOWER, "When was the tower finished?", ["1889"]),
        row("ty-2", "en", CURIE, "Where was Marie Curie born?", ["Warsaw"]),
        row("ty-3", "en", BEES, "What do bees make honey from?", ["nectar"]),
    ]


@pytest.fixture(scope="module")
def items_df():
    """Items in 'other_answers' mode (distractors from other passages allowed)."""
    items, report = build_items(
        frame(english_rows() + german_rows()), seed=7, distractors="other_answers"
    )
    assert report["too_few_distractors"] == 0
    return items


def by_id(items: pl.DataFrame) -> dict[str, dict]:
    return {r["item_id"]: r for r in items.to_dicts()}


# --- is_numeric / overlaps -------------------------------------------------


@pytest.mark.parametrize(
    "answer", ["1887", "42", "3.5", "12 000", "12,000", "1887年", "2008年8月", "٤٢", "१८८७"]
)
def test_is_numeric_true(answer):
    assert is_numeric(answer, "en")


@pytest.mark.parametrize("answer", ["Paris", "May 1887", "42 km", "5 km", "Apollo 11", "", "..."])
def test_is_numeric_false(answer):
    assert not is_numeric(answer, "en")


def test_overlaps():
    assert overlaps("Tesla", "Tesla Electric Light & Manufacturing", "en")
    assert overlaps("Tesla Electric Light & Manufacturing", "Tesla", "en")
    assert overlaps("The Beatles", "beatles!", "en")
    assert not overlaps("5", "1500", "en")
    assert not overlaps("Paris", "Parisian", "en")
    assert overlaps("北京", "北京大学", "zh")
    assert not overlaps("北京", "南京", "zh")


# --- validate_rows ---------------------------------------------------------


def test_validate_rows_counts_every_dropped_row_under_one_reason():
    rows = [
        row("ok-1", "en", TESLA, "Who founded the firm?", ["Tesla"]),
        row("ok-1", "en", TESLA, "Who founded it again?", ["Tesla"]),  # duplicate id
        row("ok-1", "en", "", "", []),  # duplicate id wins over every other defect
        row("bad-ans", "en", TESLA, "What?", []),
        row("bad-blank", "en", TESLA, "What?", ["  ", ""]),
        row("bad-punct", "en", TESLA, "What?", ["..."]),
        row("bad-missing", "en", TESLA, "Who invented the phone?", ["Bell"]),
        row("bad-q", "en", TESLA, "   ", ["Tesla"]),
        row("bad-ctx", "en", " ", "Who?", ["Tesla"]),
        row("ok-2", "en", EDISON, "Who opened the station?", ["Edison"]),
    ]
    good, report = validate_rows(frame(rows), extractive=True)
    assert good["id"].to_list() == ["ok-1", "ok-2"]
    assert good["question"][0] == "Who founded the firm?"  # the first occurrence is kept
    assert report["n_input"] == 10
    assert report["n_valid"] == 2
    assert report["duplicate_id"] == 2
    assert report["empty_answer"] == 3
    assert report["answer_not_in_passage"] == 1
    assert report["empty_question"] == 1
    assert report["empty_context"] == 1
    assert report["empty_id"] == 0
    reasons = [
        "empty_id",
        "duplicate_id",
        "empty_context",
        "empty_question",
        "empty_answer",
        "answer_not_in_passage",
    ]
    assert sum(report[r] for r in reasons) + report["n_valid"] == report["n_input"]
    assert report["examples"]["empty_answer"] == ["bad-ans", "bad-blank", "bad-punct"]
    assert report["examples"]["duplicate_id"] == ["ok-1", "ok-1"]
    assert report["examples"]["answer_not_in_passage"] == ["bad-missing"]


def test_validate_rows_answer_not_in_passage_only_when_extractive():
    rows = [row("abstractive", "en", TESLA, "Who invented the phone?", ["Bell"])]
    good, report = validate_rows(frame(rows), extractive=False)
    assert good.height == 1 and report["answer_not_in_passage"] == 0
    good, report = validate_rows(frame(rows), extractive=True)
    assert good.height == 0 and report["answer_not_in_passage"] == 1


def test_validate_rows_cleans_answers_and_keeps_starts_aligned():
    ctx = "Paris is big. Paris is old."
    rows = [
        row(
            "r",
            "en",
            ctx,
            "Which city?",
            ["", "Paris", "  ", "Paris", " Paris", "big"],
            starts=[0, 0, 3, 14, 13, 9],
        )
    ]
    good, report = validate_rows(frame(rows), extractive=True)
    assert report["n_valid"] == 1
    assert good["answers"][0].to_list() == ["Paris", "big"]
    assert good["answer_starts"][0].to_list() == [0, 9]
    assert good.schema == frame(rows).schema


def test_validate_rows_answer_found_if_any_answer_occurs():
    rows = [row("r", "en", TESLA, "Who?", ["Bell", "Tesla"])]
    good, report = validate_rows(frame(rows), extractive=True)
    assert good.height == 1 and good["answers"][0].to_list() == ["Bell", "Tesla"]


# --- build_items -----------------------------------------------------------


def test_output_columns_and_order(items_df):
    assert items_df.columns == [
        "item_id",
        "lang",
        "title",
        "context",
        "question",
        "answers",
        "options",
        "gold_option",
        "distractor_sources",
        "distractors_in_passage",
        "exemplar_id",
        "answer_kind",
        "seed",
    ]
    assert items_df["item_id"].to_list() == sorted(items_df["item_id"].to_list())
    assert items_df.height == 17
    assert set(items_df["seed"].to_list()) == {7}


def test_gold_option_points_at_the_gold(items_df):
    for r in items_df.to_dicts():
        assert len(r["options"]) == 4
        assert r["options"][r["gold_option"]] == r["answers"][0]
        assert len(r["distractor_sources"]) == 3
        assert len(set(r["options"])) == 4


def test_distractors_never_overlap_any_gold_or_each_other(items_df):
    for r in items_df.to_dicts():
        distractors = [o for k, o in enumerate(r["options"]) if k != r["gold_option"]]
        for d in distractors:
            for gold in r["answers"]:
                assert not overlaps(d, gold, r["lang"]), (r["item_id"], d, gold)
        for a in range(3):
            for b in range(a + 1, 3):
                assert not overlaps(distractors[a], distractors[b], r["lang"])
    tesla = by_id(items_df)["en-01"]
    assert "Tesla Electric Light & Manufacturing" not in tesla["options"]
    firm = by_id(items_df)["en-02"]
    assert "Tesla" not in firm["options"]


def test_same_passage_answers_come_first(items_df):
    # Rahway's passage has the other answers Tesla, Tesla Electric Light & ... and 1886;
    # the first two overlap each other, so exactly one of them plus 1886 are taken from
    # the passage and the third distractor comes from elsewhere.
    rahway = by_id(items_df)["en-04"]
    assert sorted(rahway["distractor_sources"]) == ["answer", "answer", "other_passage"]
    assert "1886" in rahway["options"]
    assert ("Tesla" in rahway["options"]) != (
        "Tesla Electric Light & Manufacturing" in rahway["options"]
    )
    # Edison's passage has exactly three other answers, none overlapping: all are used.
    edison = by_id(items_df)["en-05"]
    assert sorted(edison["options"]) == sorted(
        ["Edison", "Pearl Street Station", "Manhattan", "59"]
    )
    assert edison["distractor_sources"] == ["answer"] * 3
    assert edison["distractors_in_passage"]
    assert not rahway["distractors_in_passage"]


def test_same_kind_is_preferred(items_df):
    # 1500 is alone on its passage; the English pool has the numbers 1886, 59, 1969.
    bridge = by_id(items_df)["en-09"]
    assert bridge["answer_kind"] == "numeric"
    assert bridge["distractor_sources"] == ["other_passage"] * 3
    assert sorted(o for o in bridge["options"] if o != "1500") == ["1886", "1969", "59"]
    # A text item off its own passage draws text answers only.
    plants = by_id(items_df)["en-12"]
    assert plants["answer_kind"] == "text"
    assert plants["distractor_sources"] == ["other_passage"] * 3
    assert all(not is_numeric(o) for o in plants["options"])


def test_other_kind_only_when_short(items_df):
    zug = by_id(items_df)["de-01"]  # the only German number
    assert zug["answer_kind"] == "numeric"
    assert zug["distractor_sources"] == ["other_passage"] * 3
    assert all(not is_numeric(o, "de") for o in zug["options"] if o != "2962")  # the other kind
    berlin = by_id(items_df)["de-02"]  # three other German text answers exist
    assert berlin["distractor_sources"] == ["other_passage"] * 3
    assert "2962" not in berlin["options"]


def test_exemplar_same_language_different_context(items_df):
    items = by_id(items_df)
    for r in items.values():
        ex = items[r["exemplar_id"]]
        assert ex["lang"] == r["lang"]
        assert ex["context"] != r["context"]
        assert ex["item_id"] != r["item_id"]


def test_exemplar_is_null_when_language_has_one_context():
    ctx = "Roma, Milano, Napoli e Torino sono città."
    rows = [
        row(f"it-{k}", "it", ctx, f"Quale città {k}?", [city])
        for k, city in enumerate(["Roma", "Milano", "Napoli", "Torino"])
    ]
    items, report = build_items(frame(rows), seed=1)
    assert report["n_items"] == 4
    assert items["exemplar_id"].null_count() == 4


@pytest.mark.parametrize("mode", ["passage", "other_answers"])
def test_deterministic_and_independent_of_row_order(mode):
    rows = english_rows() + german_rows() + tydiqa_rows()
    a, _ = build_items(frame(rows), seed=7, distractors=mode)
    b, _ = build_items(frame(list(reversed(rows))), seed=7, distractors=mode)
    assert a.height > 0
    assert a.equals(b)
    c, _ = build_items(frame(rows), seed=7, distractors=mode)
    assert a.equals(c)


def test_adding_an_unrelated_item_leaves_other_items_unchanged(items_df):
    extra = row("fr-01", "fr", "Paris est la capitale.", "Quelle est la capitale ?", ["Paris"])
    more, report = build_items(
        frame(english_rows() + german_rows() + [extra]), seed=7, distractors="other_answers"
    )
    assert report["too_few_distractors"] == 1  # the lone French item has no candidates
    assert report["examples"]["too_few_distractors"] == ["fr-01"]
    assert more.equals(items_df)


def test_adding_a_same_language_item_keeps_untouched_choices():
    # A new English text answer can only displace a distractor that it outranks; the
    # numeric items draw only numbers, so they cannot change at all.
    base, _ = build_items(frame(english_rows()), seed=7, distractors="other_answers")
    extra = row("en-99", "en", "Bananas are berries.", "What are bananas?", ["berries"])
    more, _ = build_items(frame(english_rows() + [extra]), seed=7, distractors="other_answers")
    before, after = by_id(base), by_id(more)
    for item_id in ["en-09", "en-10", "en-05", "en-06", "en-07", "en-08"]:
        assert after[item_id]["options"] == before[item_id]["options"], item_id


def test_different_seed_changes_some_orders(items_df):
    other, _ = build_items(
        frame(english_rows() + german_rows()), seed=8, distractors="other_answers"
    )
    a, b = by_id(items_df), by_id(other)
    assert any(a[k]["options"] != b[k]["options"] for k in a)
    assert any(a[k]["gold_option"] != b[k]["gold_option"] for k in a)
    # The gold is still where gold_option says.
    assert all(r["options"][r["gold_option"]] == r["answers"][0] for r in b.values())


def test_too_few_distractors_is_counted():
    rows = [
        row("xx-1", "xx", "alpha beta", "q1?", ["alpha"]),
        row("xx-2", "xx", "gamma delta", "q2?", ["gamma"]),
        row("xx-3", "xx", "alpha gamma", "q3?", ["alpha gamma"]),  # overlaps both others
    ]
    items, report = build_items(frame(rows), seed=3, n_distractors=1, distractors="other_answers")
    # xx-1 can only use gamma, xx-2 only alpha, xx-3 neither.
    assert report["n_items"] == 2
    assert report["too_few_distractors"] == 1
    assert report["examples"]["too_few_distractors"] == ["xx-3"]
    assert items["item_id"].to_list() == ["xx-1", "xx-2"]
    assert by_id(items)["xx-1"]["distractor_sources"] == ["other_passage"]


# --- 'passage' distractors -------------------------------------------------


def distractors_of(item: dict) -> list[str]:
    return [o for k, o in enumerate(item["options"]) if k != item["gold_option"]]


def assert_passage_item(item: dict) -> None:
    """Every option occurs verbatim in the passage; no distractor overlaps a gold or another
    distractor (tokens after normalisation, or characters of the passage)."""
    lang, ctx = item["lang"], item["context"]
    assert all(o in ctx for o in item["options"]), item
    assert item["distractors_in_passage"]
    ds = distractors_of(item)
    assert len(ds) == 3 and len(set(item["options"])) == 4
    for d in ds:
        for gold in item["answers"]:
            assert not overlaps(d, gold, lang), (item["item_id"], d, gold)
    for a in range(3):
        for b in range(a + 1, 3):
            assert not overlaps(ds[a], ds[b], lang), (ds[a], ds[b])
            starts_a = [k for k in range(len(ctx)) if ctx.startswith(ds[a], k)]
            starts_b = [k for k in range(len(ctx)) if ctx.startswith(ds[b], k)]
            for x in starts_a:
                for y in starts_b:
                    assert x + len(ds[a]) <= y or y + len(ds[b]) <= x, (ds[a], ds[b])


def test_split_sentences_keeps_decimals_and_abbreviations():
    text = (
        "It is 3.5 m long. Dr. Smith came, e.g. by car! J. R. Tolkien wrote it. "
        "你好。再见！ok\nNew line"
    )
    got = [text[a:b] for a, b in split_sentences(text)]
    assert got == [
        "It is 3.5 m long.",
        " Dr. Smith came, e.g. by car!",
        " J. R. Tolkien wrote it.",
        " 你好。",
        "再见！",
        "ok",
        "New line",
    ]
    other = "यह एक है। क्या? هل هذا؟ نعم"
    assert [other[a:b] for a, b in split_sentences(other)] == [
        "यह एक है।",
        " क्या?",
        " هل هذا؟",
        " نعم",
    ]


def test_one_question_per_passage_gets_spans_of_the_gold_kind():
    items, report = build_items(frame(tydiqa_rows()), seed=5)
    assert report["too_few_distractors"] == 0 and report["distractors"] == "passage"
    got = by_id(items)
    for item in got.values():
        assert_passage_item(item)
        assert item["distractor_sources"] == ["span"] * 3
    # numeric gold -> single numbers of the passage (one token, like the gold)
    assert set(distractors_of(got["ty-1"])) <= {"330", "2", "1900", "7"}
    # capitalised gold -> capitalised one-word spans (names, not a sentence's first word)
    curie = distractors_of(got["ty-2"])
    assert all(d[0].isupper() and " " not in d for d in curie), curie
    assert set(curie) <= {"Paris", "Pierre", "Curie", "Henri", "Becquerel", "France"}
    # other gold -> lower-case words without digits
    bees = distractors_of(got["ty-3"])
    assert all(d[0].islower() and " " not in d and not any(c.isdigit() for c in d) for d in bees), (
        bees
    )
    assert report["distractor_sources"] == {"answer": 0, "span": 9, "other_passage": 0}
    assert report["n_items_distractors_in_passage"] == 3


def test_answers_of_the_passage_come_first_then_spans():
    items, report = build_items(frame(english_rows()), seed=7)
    for item in items.to_dicts():
        assert_passage_item(item)
    # Edison's passage: the two other names are its only answer-like ones besides the gold
    # (the other capitalised spans start or end with a function word, or touch those names),
    # so "Pearl Street Station" is dropped rather than given "Manhattan in" as an option.
    assert "en-06" not in by_id(items)
    # Rahway: its passage holds one other answer of its kind ("Tesla", or the name that
    # contains it) and no answer-like capitalised span ("The firm" starts with a function
    # word, "Electric Light" is a fragment of a longer name): dropped as well.
    # Edison's passage has only two other one-word names and a single other number: the
    # one-word name "Edison" and the number 59 cannot get three of their kind.
    assert not {"en-04", "en-05", "en-06", "en-08"} & set(by_id(items))
    # With names enough, another question's answer comes first, then spans of the passage.
    ctx = "Anna Berg met Peter Hale in Oslo. Later Ivan Petrov visited Rome with Carl Jung."
    items, _ = build_items(
        frame(
            [
                row("p-1", "en", ctx, "Who met Peter Hale?", ["Anna Berg"]),
                row("p-2", "en", ctx, "Who visited Rome?", ["Ivan Petrov"]),
            ]
        ),
        seed=7,
    )
    item = by_id(items)["p-1"]
    assert_passage_item(item)
    pairs = dict(zip(distractors_of(item), item["distractor_sources"], strict=True))
    assert pairs.pop("Ivan Petrov") == "answer"
    assert set(pairs.values()) == {"span"} and set(pairs) <= {"Peter Hale", "Carl Jung"}


def test_spans_of_the_gold_length_are_preferred():
    ctx = (
        "Yesterday Peter Hale met Anna Berg in Oslo. Later, Ivan Petrov visited Rome and Carl Jung."
    )
    items, _ = build_items(
        frame([row("p-1", "en", ctx, "Who met Anna Berg?", ["Peter Hale"])]), seed=1
    )
    item = items.to_dicts()[0]
    assert_passage_item(item)
    assert sorted(distractors_of(item)) == ["Anna Berg", "Carl Jung", "Ivan Petrov"]


def test_spans_never_overlap_a_gold_latin():
    ctx = (
        "Edison opened the Pearl Street Station in Manhattan in 1882. PEARL STREET was busy. "
        "Pearl and Street were names of Dutch origin. The Station served Wall Street bankers and "
        "Broad Street traders."
    )
    answers = ["Pearl Street", "Pearl Street Station"]
    for seed in range(5):
        items, _ = build_items(frame([row("l-1", "en", ctx, "Which street?", answers)]), seed=seed)
        item = items.to_dicts()[0]
        assert_passage_item(item)
        ds = distractors_of(item)
        # equal after normalisation, contained in a gold, containing a gold: never
        assert not {
            "PEARL STREET",
            "Pearl",
            "Street",
            "Station",
            "Street Station",
            "Pearl Street Station",
        } & set(ds)
        assert {"Wall Street", "Broad Street"} <= set(ds)  # the two-token names come first


def test_spans_never_overlap_a_gold_chinese():
    ctx = "北京大学位于北京市海淀区，成立于1898年。清华大学也位于海淀区。两所大学都很有名。"
    answers = ["北京大学", "北大"]
    for seed in range(5):
        items, _ = build_items(
            frame([row("z-1", "zh", ctx, "哪所大学成立于1898年？", answers)]), seed=seed
        )
        item = items.to_dicts()[0]
        assert_passage_item(item)
        breaks = word_breaks(ctx, "zh")
        for d in distractors_of(item):
            # characters of the passage, 2 to 6 judge tokens like a gold of 4, no digit (the
            # gold has none), cut on the word segmenter's breaks ("海淀区", never "京大学位")
            assert 2 <= len(tokenize(d, "zh")) <= 6 and not any(c.isdigit() for c in d), d
            assert "，" not in d and "。" not in d
            assert "北京大学" not in d and d not in "北京大学"
            at = ctx.index(d)
            assert at in breaks and at + len(d) in breaks, d


def test_spans_never_overlap_a_gold_greek_and_thai():
    ctx = (
        "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας. Η ΑΘΗΝΑ έχει πολλούς κατοίκους. "
        "Ο Παρθενώνας βρίσκεται στην Ακρόπολη της Αθήνας."
    )
    items, _ = build_items(
        frame([row("el-1", "el", ctx, "Ποια είναι η πρωτεύουσα;", ["Αθήνα"])]), seed=2
    )
    item = items.to_dicts()[0]
    assert_passage_item(item)
    assert "ΑΘΗΝΑ" not in item["options"]  # equal to the gold once accents and case are gone
    assert set(distractors_of(item)) <= {"Ελλάδας", "Ακρόπολη", "Αθήνας", "Παρθενώνας"}

    ctx = "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย มีประชากรประมาณ 8 ล้านคน และมีวัดมากมาย"
    items, _ = build_items(
        frame([row("th-1", "th", ctx, "เมืองหลวงของไทยคืออะไร", ["กรุงเทพมหานคร"])]), seed=2
    )
    item = items.to_dicts()[0]
    assert_passage_item(item)
    for d in distractors_of(item):
        # cut at characters, never before a combining vowel or tone mark, never across a space
        assert not unicodedata.category(d[0]).startswith("M") and " " not in d, d
        assert not any(c.isdigit() for c in d)


def test_passage_mode_drops_and_counts_items_without_three_distractors():
    rows = tydiqa_rows() + [row("ty-9", "en", "Paris is big.", "Which city is big?", ["Paris"])]
    items, report = build_items(frame(rows), seed=5)
    assert report["too_few_distractors"] == 1
    assert report["examples"]["too_few_distractors"] == ["ty-9"]
    assert report["n_items"] == 3 and items["item_id"].to_list() == ["ty-1", "ty-2", "ty-3"]
    # the same passage in 'other_answers' mode borrows answers of other passages
    items, report = build_items(frame(rows), seed=5, distractors="other_answers")
    assert report["too_few_distractors"] == 0
    assert not by_id(items)["ty-9"]["distractors_in_passage"]
    assert set(by_id(items)["ty-9"]["distractor_sources"]) == {"other_passage"}


HALVERN = (
    "Halvern was founded in 1887 by the Sorr River Company. In 1862 the old mill of Anton Berg "
    "had 120 workers and 4 boats. Berg sold it to Lorbeck. The town hall of Castrel is built of "
    "grey stone."
)


def halvern_rows():
    return [
        row("h-1", "en", HALVERN, "When was Halvern founded?", ["1887"]),
        row("h-2", "en", HALVERN, "Who founded Halvern?", ["Sorr River Company"]),
        row("h-3", "en", HALVERN, "What is the town hall built of?", ["grey stone"]),
        row("h-4", "en", HALVERN, "How many workers did the mill have?", ["120"]),
        row("h-5", "en", HALVERN, "Which town was founded in 1887?", ["Halvern"]),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_passage_answers_of_another_kind_are_not_distractors(seed):
    items, _ = build_items(frame(halvern_rows()), seed=seed)
    got = by_id(items)
    year = got["h-1"]  # a number: the name and the material answered on the passage are not used
    assert_passage_item(year)
    assert not {"Sorr River Company", "grey stone", "Halvern"} & set(year["options"])
    assert set(distractors_of(year)) == {"120", "1862", "4"}
    town = got["h-5"]  # a name: the numbers and the material are not used
    assert_passage_item(town)
    assert not {"1887", "120", "grey stone"} & set(town["options"])
    assert all(d[0].isupper() for d in distractors_of(town)), distractors_of(town)


@pytest.mark.parametrize("seed", range(5))
def test_passage_answers_of_the_gold_kind_still_come_first(seed):
    items, _ = build_items(frame(halvern_rows()), seed=seed)
    got = by_id(items)
    # 120 is the one other number answered on the passage: taken before the passage's
    # numbers 1862 and 4, whatever the seed.
    year = got["h-1"]
    pairs = dict(zip(distractors_of(year), year["distractor_sources"], strict=True))
    assert pairs == {"120": "answer", "1862": "span", "4": "span"}
    # "Sorr River Company" is the other name answered on the passage: taken although it has
    # three judge tokens to the gold's one (other questions' answers have no length window),
    # while the rest are one-word capitalised spans.
    town = got["h-5"]
    pairs = dict(zip(distractors_of(town), town["distractor_sources"], strict=True))
    assert pairs.pop("Sorr River Company") == "answer"
    assert set(pairs.values()) == {"span"} and all(" " not in d for d in pairs)


def test_item_without_three_distractors_of_its_kind_is_dropped_with_its_reason(tmp_path):
    # Two numbers and two names are answered on this passage and it holds no other number:
    # a number gold used to take the names; now it gets one distractor and is dropped.
    ctx = (
        "Castrel has 64 houses and 5 wells. Its mayor is Lorbeck, its priest is Anton Berg "
        "and its smith is Marl."
    )
    rows = [
        row("c-1", "en", ctx, "How many houses?", ["64"]),
        row("c-2", "en", ctx, "How many wells?", ["5"]),
        row("c-3", "en", ctx, "Who is the mayor?", ["Lorbeck"]),
        row("c-4", "en", ctx, "Who is the priest?", ["Anton Berg"]),
    ]
    items, report = build_items(frame(rows), seed=3)
    assert report["too_few_distractors"] == 2
    assert report["examples"]["too_few_distractors"] == ["c-1", "c-2"]
    assert report["n_items"] + report["too_few_distractors"] == 4
    assert not {"c-1", "c-2"} & set(items["item_id"])
    for item in items.to_dicts():
        assert_passage_item(item)
        assert not {"64", "5"} & set(item["options"])
    # The 'other_answers' mode is unchanged: it keeps them, names among the options.
    old, old_report = build_items(frame(rows), seed=3, distractors="other_answers")
    assert old_report["too_few_distractors"] == 0
    assert {"Lorbeck", "Anton Berg"} <= set(by_id(old)["c-1"]["options"])
    # The items report the pipeline writes (read into the item_drops table) carries the count.
    from benchmark_illusion.data import steps as datasteps

    frame(rows).write_parquet(tmp_path / "raw.parquet")
    datasteps.build_items_file(
        tmp_path / "raw.parquet",
        tmp_path / "items.parquet",
        tmp_path / "report.json",
        seed=3,
        extractive=True,
        dataset="d",
    )
    written = json.loads((tmp_path / "report.json").read_text())["items"]
    assert written["too_few_distractors"] == 2
    assert written["examples"]["too_few_distractors"] == ["c-1", "c-2"]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("1887", "digit"),
        ("12,000", "digit"),
        ("3.5", "digit"),
        ("May 1887", "digit"),
        ("Sorr River Company", "upper"),
        ("grey stone", "other"),
        ("three", "other"),
        ("km²", "other"),  # a superscript is not a decimal digit
        ("Paris¹", "upper"),  # nor is a footnote mark
        ("1.500 μέτρα", "digit"),
        ("Αθήνα", "upper"),
        ("η πόλη", "other"),
        ("１９９８年", "digit"),  # full-width digits
        ("1887年", "digit"),
        ("北京大学", "other"),
        ("三次", "other"),  # CJK numerals count as words, as "three" does
        ("๒๔๓๐", "digit"),  # Thai digits
        ("กรุงเทพมหานคร", "other"),
        ("१८५७", "digit"),  # Devanagari digits
        ("१२,०००", "digit"),
        ("दिल्ली", "other"),
        ("١٨٨٧", "digit"),  # Arabic-Indic digits
        ("٣٬٥٠٠", "digit"),  # with the Arabic thousands separator
        ("٣٢٫٩٪", "digit"),
        ("القاهرة", "other"),
    ],
)
def test_kind_of_answers_in_several_scripts(text, kind):
    assert text_kind(text) == kind


SCRIPT_CASES = [
    # (lang, passage, question, gold, an answer of another kind asked on the same passage)
    (
        "el",
        "Η Αθήνα έγινε πρωτεύουσα το 1834. Ο Όθων ήρθε από τη Βαυαρία. Η Πάτρα και η "
        "Θεσσαλονίκη είναι μεγάλες πόλεις.",
        "Ποια πόλη έγινε πρωτεύουσα;",
        "Αθήνα",
        "1834",
    ),
    (
        "zh",
        "北京大学成立于1898年。清华大学成立于1911年，两所大学在1952年调整，2000年以后继续发展。",
        "北京大学哪一年成立？",
        "1898年",
        "清华大学",
    ),
    (
        "th",
        "เมืองนี้ก่อตั้งในปี ๒๔๓๐ มีประชากร ๑๒,๐๐๐ คน มีวัด ๘ แห่ง และสร้างโรงเรียนในปี ๒๔๗๕",
        "เมืองนี้ก่อตั้งในปีใด",
        "๒๔๓๐",
        "โรงเรียน",
    ),
    (
        "hi",
        "शहर की स्थापना १८८७ में हुई। १८६२ में मिल में १२० मज़दूर थे और आबादी १२,००० थी।",
        "शहर की स्थापना कब हुई?",
        "१८८७",
        "मज़दूर",
    ),
    (
        "ar",
        "تأسست المدينة عام ١٨٨٧ على يد شركة النهر. وفي عام ١٨٦٢ كان في المطحنة ١٢٠ عاملا. "
        "وبلغ عدد السكان ٣٬٥٠٠ نسمة.",
        "متى تأسست المدينة؟",
        "١٨٨٧",
        "شركة النهر",
    ),
]


@pytest.mark.parametrize(("lang", "ctx", "question", "gold", "other"), SCRIPT_CASES)
def test_distractors_are_of_the_gold_kind_in_several_scripts(lang, ctx, question, gold, other):
    rows = [
        row(f"{lang}-1", lang, ctx, question, [gold]),
        row(f"{lang}-2", lang, ctx, "?", [other]),
    ]
    assert text_kind(other) != text_kind(gold)
    for seed in range(3):
        items, _ = build_items(frame(rows), seed=seed)
        item = by_id(items)[f"{lang}-1"]
        assert_passage_item(item)
        assert other not in item["options"]
        assert all(text_kind(d) == text_kind(gold) for d in distractors_of(item)), distractors_of(
            item
        )


def test_unknown_distractor_mode_is_refused():
    with pytest.raises(ValueError, match="distractors"):
        build_items(frame(tydiqa_rows()), seed=5, distractors="random")


@pytest.mark.parametrize("lang", ["en", "de", "es"])
def test_sample_set_options_all_occur_in_their_passage(lang):
    raw = load_raw(
        {"source": "squad_json", "path": str(ROOT / "resources" / "sample_qa" / "{lang}.json")},
        lang,
    )
    good, _ = validate_rows(raw, extractive=True)
    items, report = build_items(good, seed=1234)
    assert report["n_items"] + report["too_few_distractors"] == good.height
    # Most drops are numbers whose passage holds fewer than three other numbers.
    assert items.height >= good.height * 3 // 5
    for item in items.to_dicts():
        assert_passage_item(item)
        assert set(item["distractor_sources"]) <= {"answer", "span"}
        assert len({text_kind(o) for o in item["options"]}) == 1, item["options"]


# --- the length window and the order at equal distance (docs/design.md, Items) ------------------


def _window(n_tokens):
    """The documented window by enumeration: every whole number k with n/2 <= k <= 3n/2, in
    exact integer arithmetic (2k >= n and 2k <= 3n), and at least one token."""
    ks = [k for k in range(1, 3 * n_tokens + 2) if 2 * k >= n_tokens and 2 * k <= 3 * n_tokens]
    return (min(ks), max(ks)) if ks else (1, 1)


def test_length_range_is_half_to_one_and_a_half_times_the_gold():
    from benchmark_illusion.data.spans import length_range

    for n in range(0, 12):
        got = length_range(n)
        assert got == _window(n) and all(type(x) is int for x in got), (n, got)
    # hand-worked: 1 -> [1, 1], 3 -> [2, 4] (1.5 rounds up, 4.5 down), 4 -> [2, 6]
    assert (length_range(1), length_range(3), length_range(4)) == ((1, 1), (2, 4), (2, 6))


# Numbers written with apostrophes as thousands separators ("5'000'000") are one word of the
# passage but several judge tokens (apostrophes split words), so a span of 3 tokens needs no
# neighbouring word; the semicolons keep every number a phrase of its own.
def _number_item(gold, others, seed):
    ctx = "Sizes: " + "; ".join([gold, *others]) + "."
    return build_items(frame([row("n-1", "en", ctx, "How big?", [gold])]), seed=seed)


def test_spans_at_the_edges_of_the_length_window():
    # gold of 2 tokens: window [1, 3]; two spans of 3 tokens are in, two of 4 are not: only two
    # distractors, so the item is dropped
    others = ["5'000'000", "7'000'000", "1'000'000'000", "2'000'000'000"]
    _, report = _number_item("12 500", others, seed=1)
    assert report["too_few_distractors"] == 1
    # with a third span of 3 tokens it is built, from the three spans of 3 tokens
    items, _ = _number_item("12 500", [*others, "9'000'000"], seed=1)
    assert sorted(distractors_of(items.to_dicts()[0])) == ["5'000'000", "7'000'000", "9'000'000"]
    # gold of 3 tokens: window [2, 4]; single numbers (1 token, below 3/2) are never taken
    others = ["1887", "1900", "1950", "2'000", "3'000"]
    _, report = _number_item("5'000'000", others, seed=1)
    assert report["too_few_distractors"] == 1
    items, _ = _number_item("5'000'000", [*others, "4'000"], seed=1)
    assert sorted(distractors_of(items.to_dicts()[0])) == ["2'000", "3'000", "4'000"]


@pytest.mark.parametrize("seed", range(4))
def test_at_equal_distance_from_the_gold_length_shorter_spans_come_first(seed):
    # gold of 2 tokens: spans of 1 and of 3 tokens are both 1 away; the three of 1 token come
    # before the two of 3, whatever the keyed order
    items, _ = _number_item("12 500", ["5'000'000", "1887", "7'000'000", "1900", "1950"], seed)
    item = items.to_dicts()[0]
    assert sorted(distractors_of(item)) == ["1887", "1900", "1950"]
    assert item["distractor_sources"] == ["span"] * 3


@pytest.mark.parametrize("seed", range(3))
def test_distractors_may_touch_but_not_share_characters(seed):
    """Distractors are rejected for sharing characters of the passage, not for touching: in
    Chinese, without spaces, the other questions' answers 甲乙, 丙丁 and 戊己 follow one
    another directly and are all three taken, whatever the keyed order."""
    ctx = "北京是首都。甲乙丙丁戊己都在这里。"
    golds = ["北京", "甲乙", "丙丁", "戊己"]
    rows = [row(f"z-{k}", "zh", ctx, f"问题{k}？", [g]) for k, g in enumerate(golds)]
    items, _ = build_items(frame(rows), seed=seed)
    item = by_id(items)["z-0"]
    assert_passage_item(item)
    assert sorted(distractors_of(item)) == sorted(golds[1:])
    assert item["distractor_sources"] == ["answer"] * 3


def _found_answer_item(gold_ctx, gold, others, seed=0):
    """The item of `gold` in `gold_ctx`, alone on its passage, among items of other passages
    whose answers are `others` (each in a passage of its own)."""
    rows = [row("g-0", "en", gold_ctx, "Which one?", [gold])]
    rows += [row(f"o-{k}", "en", f"It was {a} again.", f"Q{k}?", [a]) for k, a in enumerate(others)]
    items, _ = build_items(frame(rows), seed=seed)
    return by_id(items)["g-0"]


@pytest.mark.parametrize("seed", range(3))
def test_answers_of_other_passages_found_in_the_passage_come_before_spans(seed):
    """Source (2) of 'passage' mode: first answers of other passages that occur in this passage
    on judge-token boundaries, at the edges of the length window included (a gold of 2 tokens:
    1 to 3 tokens), come before the passage's own spans and are labelled 'answer'; shorter
    before longer at equal distance from the gold's length, so the two of 1 token and one of the
    two of 3 tokens. "Camd" is in the passage's text but not on token boundaries, "Old Pearl
    Street Station" is 4 tokens: never taken."""
    ctx = (
        "In 1886 New Jersey lamps were sold in Rahway, in Camden and at the Pearl Street "
        "Station, then in Trenton, by the Hoboken Ferry Terminal and by the Old Pearl Street "
        "Station."
    )
    long = {"Pearl Street Station", "Hoboken Ferry Terminal"}
    others = ["Rahway", "Trenton", *sorted(long), "Camd", "Old Pearl Street Station"]
    item = _found_answer_item(ctx, "New Jersey", others, seed)
    assert_passage_item(item)
    got = set(distractors_of(item))
    assert {"Rahway", "Trenton"} < got and len(got - {"Rahway", "Trenton"} - long) == 0, got
    assert item["distractor_sources"] == ["answer"] * 3


def test_the_keyed_order_of_answers_and_spans_depends_on_the_seed():
    """Candidates that the rules rank equal are taken in the keyed random order of the seed and
    the text: over eight seeds an item gets more than one set of distractors, both from the other
    answers of its passage (source 1) and from its spans (source 3)."""
    ctx = "Amber, Basil, Cedar, Daisy, Ember, Fern, Ginger and Holly met Iris."
    names = ["Amber", "Basil", "Cedar", "Daisy", "Ember", "Fern"]
    rows = [row(f"p-{k}", "en", ctx, f"Who {k}?", [n]) for k, n in enumerate(["Iris", *names])]
    from_answers = {
        frozenset(distractors_of(by_id(build_items(frame(rows), seed=s)[0])["p-0"]))
        for s in range(8)
    }
    from_spans = set()
    for s in range(8):
        item = by_id(build_items(frame(rows[:1]), seed=s)[0])["p-0"]
        assert item["distractor_sources"] == ["span"] * 3
        from_spans.add(frozenset(distractors_of(item)))
    assert len(from_answers) > 1 and len(from_spans) > 1, (from_answers, from_spans)


def test_numeric_at_its_edges():
    """is_numeric's rule at its bounds: one digit is enough ("5"); exactly two thirds of the
    non-space characters is numeric ("12a", "1 2 b": spaces do not count), less is not ("1ab")."""
    assert is_numeric("5") and is_numeric("12a") and is_numeric("1 2 b")
    assert not is_numeric("1ab") and not is_numeric("1 b c")


def test_kind_of_texts_without_letters_or_digits_and_of_titlecase_letters():
    """text_kind: a text without any letter or digit is 'other'; a titlecase letter (the Latin
    digraph ǅ, neither upper nor lower case) starts an 'upper' text like a capital."""
    assert text_kind("") == "other" and text_kind("…!") == "other"
    assert text_kind("ǅakovo") == "upper" and text_kind("džakovo") == "other"


def test_numeric_reads_english_by_default():
    """is_numeric's language defaults to English, whose articles normalisation drops: "an 12" is
    the number 12 ("an12" in another language is half digits)."""
    assert is_numeric("an 12") and not is_numeric("an 12", "de")


def test_no_distractor_touches_or_shares_the_golds_place():
    """ "of grey" beside the gold "grey stone" (it ends with the gold's first word) and any span
    that shares characters of the gold's occurrence are never options."""
    ctx = (
        "The wall of the old harbour is made of grey stone. Fishermen dry their nets on it, "
        "and children paint boats on it in summer. Lanterns of paper hang from the gate."
    )
    for seed in range(6):
        items, _ = build_items(
            frame([row("w-1", "en", ctx, "What is the wall made of?", ["grey stone"])]), seed=seed
        )
        for item in items.to_dicts():
            assert_passage_item(item)
            for d in distractors_of(item):
                toks = tokenize(d, "en")
                assert toks[-1] != "grey" and toks[0] != "stone", d


@pytest.mark.parametrize("lang", ["en", "de", "es"])
def test_no_span_of_the_sample_set_is_a_function_word_phrase_or_a_name_fragment(lang):
    from benchmark_illusion.language import function_edge

    df, _ = validate_rows(
        load_raw(
            {"source": "squad_json", "path": str(ROOT / "resources/sample_qa" / f"{lang}.json")},
            lang,
        ),
        extractive=True,
    )
    items, report = build_items(df, seed=1234)
    spans = [
        d
        for item in items.to_dicts()
        for d, src in zip(distractors_of(item), item["distractor_sources"], strict=True)
        if src == "span"
    ]
    assert spans and not [d for d in spans if function_edge(d, lang)]
    assert sum(r["n_function_edge"] for r in report["option_quality"] if r["source"] == "span") == 0
    # the report's table counts every option once
    n = sum(r["n_options"] for r in report["option_quality"])
    assert n == 4 * report["n_items"]


def test_thai_spans_are_cut_on_word_breaks():
    ctx = "ทองแดงเป็นโลหะสีแดง เงินเป็นโลหะสีขาว ทองคำเป็นโลหะสีเหลือง ตะกั่วเป็นโลหะหนัก"
    items, _ = build_items(frame([row("t-1", "th", ctx, "โลหะใดมีสีขาว", ["เงิน"])]), seed=3)
    breaks = word_breaks(ctx, "th")
    for item in items.to_dicts():
        for d in distractors_of(item):
            starts = [i for i in range(len(ctx)) if ctx.startswith(d, i)]
            assert any(i in breaks and i + len(d) in breaks for i in starts), d
