"""Tests for the dataset loaders in benchmark_illusion.data.loaders, .local and .raw.

No test touches the network or a shared data folder: hub sources are exercised through
local folders laid out like the hub repositories (see `write_hub_mirror`), and every
local file is written into tmp_path by the test itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import huggingface_hub.constants
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from benchmark_illusion.data.loaders import (
    HUB_LANGUAGES,
    TYDIQA_LANGUAGES,
    XQUAD_LANGUAGES,
    load_raw,
    tydiqa_language_of,
)
from benchmark_illusion.data.raw import RAW_SCHEMA, DatasetError, raw_path_for
from benchmark_illusion.io import write_parquet

# The hub's nested schema: answers is a struct of parallel lists, offsets are int32.
HUB_ANSWERS = pa.struct([("text", pa.list_(pa.string())), ("answer_start", pa.list_(pa.int32()))])
XQUAD_HUB_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("context", pa.string()),
        ("question", pa.string()),
        ("answers", HUB_ANSWERS),
    ]
)
TYDIQA_HUB_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("title", pa.string()),
        ("context", pa.string()),
        ("question", pa.string()),
        ("answers", HUB_ANSWERS),
    ]
)


def raw_frame(rows: list[dict]) -> pl.DataFrame:
    """The expected loader output for `rows` (dicts keyed by RAW_SCHEMA's names)."""
    return pl.DataFrame(rows, schema=RAW_SCHEMA)


def row(id, lang, context, question, answers, starts, title="") -> dict:
    """One expected raw row."""
    return {
        "id": id,
        "lang": lang,
        "title": title,
        "context": context,
        "question": question,
        "answers": answers,
        "answer_starts": starts,
    }


# --------------------------------------------------------------------------- hub mirrors


@pytest.fixture
def offline_hf(tmp_path, monkeypatch):
    """Offline Hugging Face libraries whose caches live under tmp_path.

    The environment variables cover libraries imported after this point; the module
    constants are patched too because `datasets` and `huggingface_hub` read the
    variables once, at import (this module imports them before any test runs).
    """
    home = tmp_path / "hf_home"
    cache = home / "datasets"
    for name, value in {
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(home),
        "HF_DATASETS_CACHE": str(cache),
    }.items():
        monkeypatch.setenv(name, value)
    cfg = datasets.config
    monkeypatch.setattr(cfg, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(cfg, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(cfg, "HF_CACHE_HOME", str(home))
    monkeypatch.setattr(cfg, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(cfg, "HF_MODULES_CACHE", home / "modules")
    monkeypatch.setattr(cfg, "DOWNLOADED_DATASETS_PATH", cache / "downloads")
    monkeypatch.setattr(cfg, "EXTRACTED_DATASETS_PATH", cache / "downloads" / "extracted")
    hub = huggingface_hub.constants
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HOME", str(home))
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(home / "hub"))
    return home


def write_hub_mirror(root: Path, configs: dict[str, list[dict]], schema: pa.Schema) -> str:
    """Write a folder that `datasets.load_dataset(root, config, split='validation')` reads like
    the hub repo.

    Layout (what works with datasets 5.2, verified by these tests):

        root/README.md                              YAML front matter declaring the configs
        root/<config>/validation-00000-of-00001.parquet

    README.md front matter:

        ---
        configs:
        - config_name: xquad.en
          data_files:
          - split: validation
            path: xquad.en/validation-*.parquet
        ---

    This is the layout of the hub's own parquet conversion, so the loader's real call,
    `load_dataset(hub_id, name, split=..., revision=None)`, runs unchanged with the
    folder's path as hub_id. No loading script, dataset_info or .gitattributes needed.
    """
    lines = ["---", "configs:"]
    for name, rows in configs.items():
        (root / name).mkdir(parents=True)
        pq.write_table(
            pa.Table.from_pylist(rows, schema=schema),
            root / name / "validation-00000-of-00001.parquet",
        )
        lines += [
            f"- config_name: {name}",
            "  data_files:",
            "  - split: validation",
            f"    path: {name}/validation-*.parquet",
        ]
    lines += ["---", "", "# Local mirror for tests", ""]
    (root / "README.md").write_text("\n".join(lines), encoding="utf-8")
    return str(root)


def hub_row(id, context, question, texts, starts, title=None) -> dict:
    """One row in the hub's nested schema."""
    out = {
        "id": id,
        "context": context,
        "question": question,
        "answers": {"text": texts, "answer_start": starts},
    }
    if title is not None:
        out["title"] = title
    return out


XQUAD_MIRROR = {
    "xquad.en": [
        hub_row(
            "q1",
            "Paris is the capital of France.",
            "What is the capital of France?",
            ["Paris"],
            [0],
        ),
        hub_row("q2", "It has 3 parts.", "How many parts?", ["3", "3 parts"], [7, 7]),
    ],
    "xquad.de": [
        hub_row(
            "q1", "Paris ist die Hauptstadt Frankreichs.", "Was ist die Hauptstadt?", ["Paris"], [0]
        ),
    ],
}


def expected_xquad_en() -> pl.DataFrame:
    """What every loader must return for XQUAD_MIRROR's English rows."""
    return raw_frame(
        [
            row(
                "q1",
                "en",
                "Paris is the capital of France.",
                "What is the capital of France?",
                ["Paris"],
                [0],
            ),
            row("q2", "en", "It has 3 parts.", "How many parts?", ["3", "3 parts"], [7, 7]),
        ]
    )


@pytest.fixture
def xquad_mirror(tmp_path, offline_hf) -> str:
    return write_hub_mirror(tmp_path / "xquad", XQUAD_MIRROR, XQUAD_HUB_SCHEMA)


def test_mirror_layout_is_read_by_datasets_itself(xquad_mirror):
    """The README `configs:` mechanism exposes each config and split straight from the folder."""
    assert datasets.get_dataset_config_names(xquad_mirror) == ["xquad.en", "xquad.de"]
    ds = datasets.load_dataset(xquad_mirror, "xquad.en", split="validation")
    assert ds.num_rows == 2
    assert ds[1]["answers"] == {"text": ["3", "3 parts"], "answer_start": [7, 7]}


def test_xquad_hub_gives_exact_rows(xquad_mirror, offline_hf):
    got = load_raw({"source": "xquad_hub", "hub_id": xquad_mirror}, "en")
    assert_frame_equal(got, expected_xquad_en())
    # The cache went to tmp_path, not ~/.cache.
    assert (offline_hf / "datasets").is_dir()


def test_xquad_hub_picks_the_language_config(xquad_mirror):
    got = load_raw({"source": "xquad_hub", "hub_id": xquad_mirror, "split": "validation"}, "de")
    expected = raw_frame(
        [
            row(
                "q1",
                "de",
                "Paris ist die Hauptstadt Frankreichs.",
                "Was ist die Hauptstadt?",
                ["Paris"],
                [0],
            )
        ]
    )
    assert_frame_equal(got, expected)


def test_xquad_hub_language_missing_from_the_repo(xquad_mirror):
    # 'ar' is an XQuAD language, but this mirror has no such config.
    with pytest.raises(DatasetError, match=r"xquad\.ar"):
        load_raw({"source": "xquad_hub", "hub_id": xquad_mirror}, "ar")


def test_hub_language_outside_the_dataset_fails_before_loading(offline_hf):
    with pytest.raises(DatasetError, match="no language 'fi'"):
        load_raw({"source": "xquad_hub"}, "fi")
    with pytest.raises(DatasetError, match="no language 'de'"):
        load_raw({"source": "tydiqa_hub"}, "de")


@pytest.mark.parametrize("source", ["xquad_hub", "tydiqa_hub"])
def test_unreachable_hub_suggests_local_source(offline_hf, source):
    """With offline mode and an empty cache, the default hub ids cannot load."""
    with pytest.raises(DatasetError, match="Hub could not be reached") as info:
        load_raw({"source": source}, "en")
    message = str(info.value)
    assert "local source" in message
    assert (
        "google/xquad" if source == "xquad_hub" else "google-research-datasets/tydiqa"
    ) in message


TYDIQA_MIRROR = {
    "secondary_task": [
        hub_row(
            "english-1-0", "Helsinki is big.", "What is big?", ["Helsinki"], [0], title="Helsinki"
        ),
        hub_row(
            "arabic--2-0",
            "القاهرة مدينة كبيرة.",
            "ما هي المدينة الكبيرة؟",
            ["القاهرة"],
            [0],
            title="القاهرة",
        ),
        hub_row(
            "finnish-3-1", "Helsinki on iso.", "Mikä on iso?", ["Helsinki"], [0], title="Helsinki"
        ),
        hub_row("arabic-4-1", "الرباط عاصمة.", "ما هي العاصمة؟", [], [], title="الرباط"),
        hub_row("japanese-5-0", "東京は大きい。", "何が大きい？", ["東京"], [0], title="東京"),
    ]
}


@pytest.fixture
def tydiqa_mirror(tmp_path, offline_hf) -> str:
    return write_hub_mirror(tmp_path / "tydiqa", TYDIQA_MIRROR, TYDIQA_HUB_SCHEMA)


def test_tydiqa_hub_keeps_only_the_requested_language(tydiqa_mirror):
    got = load_raw({"source": "tydiqa_hub", "hub_id": tydiqa_mirror}, "ar")
    expected = raw_frame(
        [
            row(
                "arabic--2-0",
                "ar",
                "القاهرة مدينة كبيرة.",
                "ما هي المدينة الكبيرة؟",
                ["القاهرة"],
                [0],
                "القاهرة",
            ),
            # No answers: kept, the later step counts it.
            row("arabic-4-1", "ar", "الرباط عاصمة.", "ما هي العاصمة؟", [], [], "الرباط"),
        ]
    )
    assert_frame_equal(got, expected)


def test_tydiqa_hub_maps_every_prefix(tydiqa_mirror):
    assert load_raw({"source": "tydiqa_hub", "hub_id": tydiqa_mirror}, "ja")["id"].to_list() == [
        "japanese-5-0"
    ]
    assert load_raw({"source": "tydiqa_hub", "hub_id": tydiqa_mirror}, "fi")["id"].to_list() == [
        "finnish-3-1"
    ]


def test_tydiqa_hub_language_without_rows(tydiqa_mirror):
    with pytest.raises(
        DatasetError, match=r"no rows for language 'sw'.*\['ar', 'en', 'fi', 'ja'\]"
    ):
        load_raw({"source": "tydiqa_hub", "hub_id": tydiqa_mirror}, "sw")


def test_tydiqa_language_mapping():
    assert TYDIQA_LANGUAGES == {
        "arabic": "ar",
        "bengali": "bn",
        "english": "en",
        "finnish": "fi",
        "indonesian": "id",
        "japanese": "ja",
        "korean": "ko",
        "russian": "ru",
        "swahili": "sw",
        "telugu": "te",
        "thai": "th",
    }
    ids = pl.Series(
        [f"{name}-123-0" for name in TYDIQA_LANGUAGES] + ["klingon-1-0", "english", None]
    )
    assert tydiqa_language_of(ids).to_list() == list(TYDIQA_LANGUAGES.values()) + [None, None, None]


def test_hub_language_lists():
    assert XQUAD_LANGUAGES == [
        "ar",
        "de",
        "el",
        "en",
        "es",
        "hi",
        "ro",
        "ru",
        "th",
        "tr",
        "vi",
        "zh",
    ]
    assert HUB_LANGUAGES == {
        "xquad_hub": XQUAD_LANGUAGES,
        "tydiqa_hub": ["ar", "bn", "en", "fi", "id", "ja", "ko", "ru", "sw", "te", "th"],
    }


# --------------------------------------------------------------------------- squad_json


def write_json(path: Path, obj) -> str:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return str(path)


SQUAD_EN = {
    "version": "1.1",
    "data": [
        {
            "title": "France",
            "paragraphs": [
                {
                    "context": "Paris is the capital of France.",
                    "qas": [
                        {
                            "id": "a1",
                            "question": "Capital?",
                            "answers": [{"text": "Paris", "answer_start": 0}],
                        },
                        {
                            "id": "a2",
                            "question": "Country?",
                            # A second answer without an offset becomes -1.
                            "answers": [
                                {"text": "France", "answer_start": 24},
                                {"text": "France."},
                            ],
                        },
                    ],
                }
            ],
        },
        {
            "title": "Empty",
            "paragraphs": [
                {
                    "context": "Nothing here.",
                    "qas": [{"id": "b1", "question": "What?", "answers": []}],
                }
            ],
        },
    ],
}

SQUAD_ZH = {
    "data": [
        {
            "title": "北京",
            "paragraphs": [
                {
                    "context": "北京是中国的首都。",
                    "qas": [
                        {
                            "id": "z1",
                            "question": "中国的首都是哪里？",
                            "answers": [{"text": "北京", "answer_start": 0}],
                        }
                    ],
                }
            ],
        }
    ]
}


def test_squad_json_gives_exact_rows(tmp_path):
    path = write_json(tmp_path / "squad.en.json", SQUAD_EN)
    got = load_raw({"source": "squad_json", "path": path}, "en")
    expected = raw_frame(
        [
            row(
                "a1", "en", "Paris is the capital of France.", "Capital?", ["Paris"], [0], "France"
            ),
            row(
                "a2",
                "en",
                "Paris is the capital of France.",
                "Country?",
                ["France", "France."],
                [24, -1],
                "France",
            ),
            row("b1", "en", "Nothing here.", "What?", [], [], "Empty"),
        ]
    )
    assert_frame_equal(got, expected)


def test_squad_json_non_latin_through_path_template(tmp_path):
    write_json(tmp_path / "squad.zh.json", SQUAD_ZH)
    cfg = {"source": "squad_json", "path": str(tmp_path / "squad.{lang}.json")}
    got = load_raw(cfg, "zh")
    expected = raw_frame(
        [row("z1", "zh", "北京是中国的首都。", "中国的首都是哪里？", ["北京"], [0], "北京")]
    )
    assert_frame_equal(got, expected)


def test_squad_json_article_without_title(tmp_path):
    doc = {
        "data": [
            {"paragraphs": [{"context": "c", "qas": [{"id": 7, "question": "q", "answers": []}]}]}
        ]
    }
    got = load_raw({"source": "squad_json", "path": write_json(tmp_path / "t.json", doc)}, "en")
    assert got.row(0, named=True) == row("7", "en", "c", "q", [], [])


# --------------------------------------------------------------------------- jsonl


def write_jsonl(path: Path, objs: list) -> str:
    path.write_text(
        "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs), encoding="utf-8"
    )
    return str(path)


@pytest.mark.parametrize(
    ("answers", "extra", "texts", "starts"),
    [
        pytest.param(["Paris", "paris"], {}, ["Paris", "paris"], [-1, -1], id="strings"),
        pytest.param(["Paris"], {"answer_starts": [0]}, ["Paris"], [0], id="strings+answer_starts"),
        pytest.param(
            [{"text": "Paris", "answer_start": 0}, {"text": "paris"}],
            {},
            ["Paris", "paris"],
            [0, -1],
            id="objects",
        ),
        pytest.param({"text": ["Paris"], "answer_start": [0]}, {}, ["Paris"], [0], id="columnar"),
        pytest.param(
            {"text": ["Paris", "P"]}, {}, ["Paris", "P"], [-1, -1], id="columnar-no-starts"
        ),
        pytest.param([], {}, [], [], id="empty"),
    ],
)
def test_jsonl_answer_shapes(tmp_path, answers, extra, texts, starts):
    obj = {"id": "x", "context": "Paris.", "question": "Where?", "answers": answers, **extra}
    got = load_raw({"source": "jsonl", "path": write_jsonl(tmp_path / "d.jsonl", [obj])}, "fr")
    assert_frame_equal(got, raw_frame([row("x", "fr", "Paris.", "Where?", texts, starts)]))


def test_jsonl_filters_on_lang_and_keeps_title(tmp_path):
    objs = [
        {
            "id": "1",
            "lang": "en",
            "title": "T",
            "context": "c1",
            "question": "q1",
            "answers": ["a"],
        },
        {
            "id": "2",
            "lang": "ru",
            "context": "Москва",
            "question": "Где?",
            "answers": ["Москва"],
            "answer_starts": [0],
        },
        {"id": "3", "lang": "en", "context": "c3", "question": "q3", "answers": ["b"]},
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl", objs)
    assert_frame_equal(
        load_raw({"source": "jsonl", "path": path}, "en"),
        raw_frame(
            [row("1", "en", "c1", "q1", ["a"], [-1], "T"), row("3", "en", "c3", "q3", ["b"], [-1])]
        ),
    )
    assert_frame_equal(
        load_raw({"source": "jsonl", "path": path}, "ru"),
        raw_frame([row("2", "ru", "Москва", "Где?", ["Москва"], [0])]),
    )
    with pytest.raises(
        DatasetError, match=r"mixed\.jsonl: no rows for language 'de'.*\['en', 'ru'\]"
    ):
        load_raw({"source": "jsonl", "path": path}, "de")


def test_jsonl_skips_blank_lines(tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_text(
        '\n{"id": "1", "context": "c", "question": "q", "answers": ["a"]}\n\n', encoding="utf-8"
    )
    assert load_raw({"source": "jsonl", "path": str(path)}, "en").height == 1


# --------------------------------------------------------------------------- invisible characters


def test_leading_bom_is_removed_and_offsets_shift(tmp_path):
    """The Turkish XQuAD passages start with U+FEFF; offsets count it, so they move back by one."""
    context = "\ufeffİstanbul 1850'den beri büyüdü."
    doc = {
        "data": [
            {
                "title": "\u200eŞehir",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": "t1",
                                "question": "\u200bNe zamandan beri?\u2060",
                                "answers": [
                                    {"text": "1850", "answer_start": context.index("1850")},
                                    {
                                        "text": "\ufeffİstanbul",
                                        "answer_start": 0,
                                    },  # the answer carries the BOM too
                                    {"text": "beri"},  # no offset: stays -1
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    got = load_raw({"source": "squad_json", "path": write_json(tmp_path / "tr.json", doc)}, "tr")
    r = got.row(0, named=True)
    assert r["context"] == "İstanbul 1850'den beri büyüdü."
    assert (r["title"], r["question"]) == ("Şehir", "Ne zamandan beri?")
    assert r["answers"] == ["1850", "İstanbul", "beri"]
    assert r["answer_starts"] == [9, 0, -1]
    # the third answer has no offset (-1): only the first two are compared
    assert [
        r["context"][s : s + len(a)]
        for a, s in zip(r["answers"][:2], r["answer_starts"], strict=False)
    ] == ["1850", "İstanbul"]


@pytest.mark.parametrize("mark", ["\ufeff", "\u200b", "\u200e", "\u200f", "\u2060"])
def test_every_invisible_edge_character_is_removed_in_flat_sources(tmp_path, mark):
    obj = {
        "id": "x",
        "context": f"{mark}{mark}Paris.{mark}",
        "question": f"{mark}Where?",
        "answers": ["Paris"],
        "answer_starts": [2],
    }
    got = load_raw({"source": "jsonl", "path": write_jsonl(tmp_path / "d.jsonl", [obj])}, "fr")
    assert_frame_equal(got, raw_frame([row("x", "fr", "Paris.", "Where?", ["Paris"], [0])]))


def test_invisible_characters_inside_a_text_are_kept(tmp_path):
    obj = {
        "id": "x",
        "context": "Pa\u200bris.",
        "question": "Where?",
        "answers": ["Pa\u200bris"],
        "answer_starts": [0],
    }
    got = load_raw({"source": "jsonl", "path": write_jsonl(tmp_path / "d.jsonl", [obj])}, "fr")
    assert_frame_equal(
        got, raw_frame([row("x", "fr", "Pa\u200bris.", "Where?", ["Pa\u200bris"], [0])])
    )


# --------------------------------------------------------------------------- parquet


def test_parquet_flat_rows(tmp_path):
    df = pl.DataFrame(
        {
            "id": ["1", "2", "3"],
            "lang": ["en", "de", "en"],
            "context": ["c1", "c2", "c3"],
            "question": ["q1", "q2", "q3"],
            "answers": [["a", "b"], ["x"], []],
            "answer_starts": [[0, None], [1], []],
        }
    )
    write_parquet(df, tmp_path / "flat.parquet")
    got = load_raw({"source": "parquet", "path": str(tmp_path / "flat.parquet")}, "en")
    expected = raw_frame(
        [row("1", "en", "c1", "q1", ["a", "b"], [0, -1]), row("3", "en", "c3", "q3", [], [])]
    )
    assert_frame_equal(got, expected)


def test_parquet_nested_answers_without_lang_column(tmp_path):
    df = pl.DataFrame(
        {
            "id": ["1", "2"],
            "title": ["T", None],
            "context": ["Ελλάδα", "c2"],
            "question": ["Πού;", "q2"],
            "answers": [
                [{"text": "Ελλάδα", "answer_start": 0}],
                [{"text": "y", "answer_start": None}],
            ],
        }
    )
    path = tmp_path / "greek.parquet"
    write_parquet(df, path)
    got = load_raw({"source": "parquet", "path": str(path)}, "el")
    expected = raw_frame(
        [
            row("1", "el", "Ελλάδα", "Πού;", ["Ελλάδα"], [0], "T"),
            row("2", "el", "c2", "q2", ["y"], [-1]),
        ]
    )
    assert_frame_equal(got, expected)


def test_parquet_hub_style_struct_answers(tmp_path):
    path = tmp_path / "hubstyle.parquet"
    pq.write_table(pa.Table.from_pylist(XQUAD_MIRROR["xquad.en"], schema=XQUAD_HUB_SCHEMA), path)
    got = load_raw({"source": "parquet", "path": str(path)}, "en")
    assert_frame_equal(got, expected_xquad_en())


# --------------------------------------------------------------------------- malformed inputs


def test_missing_file_is_named(tmp_path):
    path = tmp_path / "absent.en.json"
    with pytest.raises(DatasetError, match=r"absent\.en\.json: file not found"):
        load_raw({"source": "squad_json", "path": str(tmp_path / "absent.{lang}.json")}, "en")
    assert not path.exists()


def test_squad_json_malformed_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"broken\.json: malformed JSON"):
        load_raw({"source": "squad_json", "path": str(path)}, "en")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(
            [{"title": "x"}], "expected a JSON object with a 'data' list", id="top-level-list"
        ),
        pytest.param({"version": "1.1"}, "expected a JSON object with a 'data' list", id="no-data"),
        pytest.param(
            {"data": [{"title": "x"}]},
            r"data\[0\]: missing key\(s\) \['paragraphs'\]",
            id="no-paragraphs",
        ),
        pytest.param(
            {"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "1", "answers": []}]}]}]},
            r"data\[0\]\.paragraphs\[0\]\.qas\[0\]: missing key\(s\) \['question'\]",
            id="no-question",
        ),
        pytest.param(
            {
                "data": [
                    {
                        "paragraphs": [
                            {"context": "c", "qas": [{"id": "1", "question": "q", "answers": [{}]}]}
                        ]
                    }
                ]
            },
            r"answers\[0\]: missing key\(s\) \['text'\]",
            id="answer-without-text",
        ),
        pytest.param(
            {"data": [{"paragraphs": {"context": "c"}}]},
            "'paragraphs' must be a list",
            id="dict-paragraphs",
        ),
        pytest.param({"data": []}, "no rows for language 'en'", id="empty"),
    ],
)
def test_squad_json_wrong_structure(tmp_path, doc, message):
    path = write_json(tmp_path / "bad.json", doc)
    with pytest.raises(DatasetError, match=message) as info:
        load_raw({"source": "squad_json", "path": path}, "en")
    assert "bad.json" in str(info.value)


def test_jsonl_malformed_line_is_located(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "1", "context": "c", "question": "q", "answers": []}\n{"id": \n', encoding="utf-8"
    )
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: malformed JSON"):
        load_raw({"source": "jsonl", "path": str(path)}, "en")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param(
            {"id": "1", "context": "c", "question": "q"},
            r"missing key\(s\) \['answers'\]",
            id="no-answers",
        ),
        pytest.param(["not", "an", "object"], "expected a JSON object, got list", id="array-line"),
        pytest.param(
            {"id": "1", "context": "c", "question": "q", "answers": "Paris"},
            "'answers' must be a list",
            id="str",
        ),
        pytest.param(
            {"id": "1", "context": "c", "question": "q", "answers": [1, 2]},
            "must be a list of strings",
            id="ints",
        ),
        pytest.param(
            {"id": "1", "context": "c", "question": "q", "answers": ["a"], "answer_starts": ["0"]},
            "answer offset must be an integer",
            id="str-offset",
        ),
        pytest.param(
            {"id": "1", "context": 3, "question": "q", "answers": []},
            "'context' must be a string",
            id="ctx",
        ),
    ],
)
def test_jsonl_wrong_structure(tmp_path, obj, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [obj])
    with pytest.raises(DatasetError, match=r"bad\.jsonl:1: .*" + message):
        load_raw({"source": "jsonl", "path": path}, "en")


def test_jsonl_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"empty\.jsonl: no rows for language 'en'"):
        load_raw({"source": "jsonl", "path": str(path)}, "en")


def test_parquet_missing_column(tmp_path):
    path = tmp_path / "nocol.parquet"
    write_parquet(pl.DataFrame({"id": ["1"], "context": ["c"], "question": ["q"]}), path)
    with pytest.raises(DatasetError, match=r"nocol\.parquet: missing column\(s\) \['answers'\]"):
        load_raw({"source": "parquet", "path": str(path)}, "en")


def test_parquet_unreadable_file(tmp_path):
    path = tmp_path / "fake.parquet"
    path.write_text("not parquet", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"fake\.parquet: could not be read as Parquet"):
        load_raw({"source": "parquet", "path": str(path)}, "en")


def test_unknown_source_and_missing_path():
    with pytest.raises(DatasetError, match="unknown dataset source 'csv'"):
        load_raw({"source": "csv", "path": "x.csv"}, "en")
    with pytest.raises(DatasetError, match="needs a 'path'"):
        load_raw({"source": "jsonl"}, "en")


def test_dataset_error_is_a_value_error():
    assert issubclass(DatasetError, ValueError)


# --------------------------------------------------------------------------- raw_path_for


def test_raw_path_for():
    assert (
        raw_path_for({"source": "squad_json", "path": "data/xquad.{lang}.json"}, "de")
        == "data/xquad.de.json"
    )
    assert (
        raw_path_for({"source": "parquet", "path": "data/all.parquet"}, "de") == "data/all.parquet"
    )
    assert raw_path_for({"source": "jsonl", "path": "{lang}/{lang}.jsonl"}, "th") == "th/th.jsonl"
    assert raw_path_for({"source": "xquad_hub"}, "en") is None
    assert raw_path_for({"source": "tydiqa_hub", "hub_id": "x/y"}, "en") is None
