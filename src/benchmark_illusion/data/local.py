"""Local dataset sources (SQuAD-layout JSON, JSON lines, Parquet) read into the raw schema,
with the structure checks and the final conforming step (cast, invisible-edge stripping) that
every loader shares."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from benchmark_illusion.data.raw import (
    FLAT_REQUIRED,
    MISSING_START,
    RAW_SCHEMA,
    DatasetError,
    raw_path_for,
)


def load_squad_json(cfg: dict, lang: str) -> pl.DataFrame:
    """Every question of a SQuAD v1.1-layout JSON file ({data: [{title, paragraphs: [...]}]}).

    XQuAD's release files use the same layout. Questions with no answers are kept.
    """
    path = _existing_path(cfg, lang)
    doc = _read_json(path)
    return _records_frame(list(_squad_records(doc, path)), lang, path)


def load_jsonl(cfg: dict, lang: str) -> pl.DataFrame:
    """Rows of a JSON-lines file of flat QA objects; rows whose 'lang' differs from `lang` are
    skipped."""
    path = _existing_path(cfg, lang)
    records, langs_seen = [], set()
    for line_no, obj in _read_jsonl(path):
        where = f"{path}:{line_no}"
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if "lang" in obj:
            langs_seen.add(str(obj["lang"]))
            if obj["lang"] != lang:
                continue
        records.append(_flat_record(obj, where))
    return _records_frame(records, lang, path, langs_seen)


def load_parquet(cfg: dict, lang: str) -> pl.DataFrame:
    """Rows of a Parquet file of flat QA rows; rows whose 'lang' differs from `lang` are skipped."""
    path = _existing_path(cfg, lang)
    try:
        df = pl.read_parquet(path)
    except Exception as e:  # polars raises several unrelated types for unreadable files
        raise DatasetError(f"{path}: could not be read as Parquet ({type(e).__name__}: {e})") from e
    require_columns(df.columns, FLAT_REQUIRED, path)
    df = df.with_row_index("_row")
    langs_seen: set = set()
    if "lang" in df.columns:
        langs_seen = set(df["lang"].unique().to_list())
        df = df.filter(pl.col("lang") == lang)
    records = [_flat_record(row, f"{path} row {row['_row']}") for row in df.iter_rows(named=True)]
    return _records_frame(records, lang, path, langs_seen)


def _existing_path(cfg: dict, lang: str) -> str:
    """The resolved local path, checked to be an existing file."""
    path = raw_path_for(cfg, lang)
    if not Path(path).is_file():
        raise DatasetError(f"{path}: file not found (source {cfg['source']!r}, lang {lang!r})")
    return path


def _read_json(path: str) -> Any:
    """Parse a whole JSON file, turning decode errors into DatasetError."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DatasetError(
            f"{path}: malformed JSON ({e.msg} at line {e.lineno}, column {e.colno})"
        ) from e
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e})") from e


def _read_jsonl(path: str) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object) for each non-blank line."""
    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    yield line_no, json.loads(line)
                except json.JSONDecodeError as e:
                    raise DatasetError(
                        f"{path}:{line_no}: malformed JSON ({e.msg} at column {e.colno})"
                    ) from e
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e})") from e


def _squad_records(doc: Any, path: str) -> Iterator[dict]:
    """Flatten the SQuAD nesting into one record per question, checking the structure on the way."""
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        got = type(doc).__name__ if not isinstance(doc, dict) else f"keys {sorted(doc)}"
        raise DatasetError(
            f"{path}: expected a JSON object with a 'data' list (SQuAD layout), got {got}"
        )
    for i, article in enumerate(doc["data"]):
        at = f"{path}: data[{i}]"
        _require_keys(article, ("paragraphs",), at)
        title = _text(article.get("title", ""), "title", at) or ""
        for j, paragraph in enumerate(_list(article["paragraphs"], "paragraphs", at)):
            at_p = f"{at}.paragraphs[{j}]"
            _require_keys(paragraph, ("context", "qas"), at_p)
            context = _text(paragraph["context"], "context", at_p)
            for k, qa in enumerate(_list(paragraph["qas"], "qas", at_p)):
                at_q = f"{at_p}.qas[{k}]"
                _require_keys(qa, ("id", "question", "answers"), at_q)
                texts, starts = _split_answers(qa["answers"], None, at_q)
                yield {
                    "id": _identifier(qa["id"], at_q),
                    "title": title,
                    "context": context,
                    "question": _text(qa["question"], "question", at_q),
                    "answers": texts,
                    "answer_starts": starts,
                }


def _flat_record(row: dict, where: str) -> dict:
    """Reshape one flat row (jsonl object or parquet row) into a raw record without 'lang'."""
    _require_keys(row, FLAT_REQUIRED, where)
    texts, starts = _split_answers(row["answers"], row.get("answer_starts"), where)
    return {
        "id": _identifier(row["id"], where),
        "title": _text(row.get("title"), "title", where) or "",
        "context": _text(row["context"], "context", where),
        "question": _text(row["question"], "question", where),
        "answers": texts,
        "answer_starts": starts,
    }


def _split_answers(value: Any, explicit_starts: Any, where: str) -> tuple[list, list]:
    """Answer texts and character offsets from any accepted answers shape.

    Accepted: a list of strings; a list of {text, answer_start?}; a dict
    {text: [...], answer_start?: [...]}; null (no answers). Offsets carried by the
    answers themselves win over a separate `answer_starts`; absent offsets are -1.
    Lengths are not reconciled: a mismatch is a bad row for the later count.
    """
    if value is None:
        return [], []
    if isinstance(value, dict):
        _require_keys(value, ("text",), f"{where}: answers")
        texts = _str_list(value["text"], "answers.text", where)
        starts = value.get("answer_start")
        return texts, _starts(starts, len(texts), where)
    if not isinstance(value, list):
        raise DatasetError(
            f"{where}: 'answers' must be a list or an object, got {type(value).__name__}"
        )
    if all(isinstance(a, dict) for a in value):
        for n, a in enumerate(value):
            _require_keys(a, ("text",), f"{where}: answers[{n}]")
        texts = _str_list([a["text"] for a in value], "answers.text", where)
        starts = [_start(a.get("answer_start"), where) for a in value]
        return texts, starts
    texts = _str_list(value, "answers", where)
    return texts, _starts(explicit_starts, len(texts), where)


def _starts(value: Any, n_answers: int, where: str) -> list[int]:
    """Offsets from a list (nulls become -1), or -1 for each answer when there is no list."""
    if value is None:
        return [MISSING_START] * n_answers
    if not isinstance(value, list):
        raise DatasetError(f"{where}: answer offsets must be a list, got {type(value).__name__}")
    return [_start(s, where) for s in value]


def _start(value: Any, where: str) -> int:
    """One answer offset; null becomes -1."""
    if value is None:
        return MISSING_START
    if isinstance(value, bool) or not isinstance(value, int):
        raise DatasetError(f"{where}: answer offset must be an integer, got {value!r}")
    return value


def _str_list(value: Any, field: str, where: str) -> list:
    """A list whose items are strings (or null); anything else is a structural error."""
    if not isinstance(value, list) or not all(v is None or isinstance(v, str) for v in value):
        raise DatasetError(f"{where}: '{field}' must be a list of strings, got {value!r:.120}")
    return value


def _identifier(value: Any, where: str) -> str | None:
    """Row id as text; integer ids (common in hand-made jsonl) are written in decimal."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _text(value, "id", where)


def _text(value: Any, field: str, where: str) -> str | None:
    """A string field; null passes through for the later bad-row count."""
    if value is not None and not isinstance(value, str):
        raise DatasetError(f"{where}: '{field}' must be a string, got {type(value).__name__}")
    return value


def _list(value: Any, field: str, where: str) -> list:
    """A list-valued structural field."""
    if not isinstance(value, list):
        raise DatasetError(f"{where}: '{field}' must be a list, got {type(value).__name__}")
    return value


def _require_keys(obj: Any, keys: Iterable[str], where: str) -> None:
    """Fail naming `where` unless `obj` is a dict holding every key."""
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected an object, got {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise DatasetError(f"{where}: missing key(s) {missing}")


def require_columns(columns: Iterable[str], required: Iterable[str], where: str) -> None:
    """Fail naming `where` unless every required column is present."""
    columns = list(columns)
    missing = [c for c in required if c not in columns]
    if missing:
        raise DatasetError(f"{where}: missing column(s) {missing} (found: {columns})")


def _records_frame(
    records: list[dict], lang: str, where: str, langs_seen: set | None = None
) -> pl.DataFrame:
    """Build the RAW_SCHEMA frame from records; no records at all is an error."""
    if not records:
        found = f" (languages in file: {sorted(map(str, langs_seen))})" if langs_seen else ""
        raise DatasetError(f"{where}: no rows for language {lang!r}{found}")
    columns = {name: [r[name] for r in records] for name in RAW_SCHEMA if name != "lang"}
    columns["lang"] = [lang] * len(records)
    return conform(pl.DataFrame(columns, schema_overrides=RAW_SCHEMA), where)


def conform(df: pl.DataFrame, where: str) -> pl.DataFrame:
    """Select RAW_SCHEMA's columns in order, cast to its types, strip invisible edges.

    Every loader passes through here. A failed cast names `where`.
    """
    try:
        df = df.select(pl.col(name).cast(dtype) for name, dtype in RAW_SCHEMA.items())
    except pl.exceptions.PolarsError as e:
        raise DatasetError(f"{where}: columns do not fit the raw schema ({e})") from e
    return strip_invisible_edges(df)


# Invisible characters that some sources leave at the start or end of a text (the Turkish
# XQuAD passages start with a BOM): BOM, zero-width space, direction marks, word joiner.
INVISIBLE_EDGES = "\ufeff\u200b\u200e\u200f\u2060"


def _strip_edges(text: str | None) -> tuple[str | None, int]:
    """(text without invisible characters at either end, how many were removed at the start)."""
    if text is None:
        return None, 0
    head = text.lstrip(INVISIBLE_EDGES)
    return head.rstrip(INVISIBLE_EDGES), len(text) - len(head)


def strip_invisible_edges(df: pl.DataFrame) -> pl.DataFrame:
    """Remove INVISIBLE_EDGES from both ends of title, context, question and every answer.

    They would reach the prompts and make the answer text differ from the passage's.
    answer_starts move with the text: by the characters removed from the start of the
    context, back by those removed from the start of the answer; missing offsets (-1)
    stay -1. Rows without such characters are returned unchanged.
    """
    text_cols = ("title", "context", "question")
    has = pl.any_horizontal(
        *(
            pl.col(c).str.contains(f"^[{INVISIBLE_EDGES}]|[{INVISIBLE_EDGES}]$").fill_null(False)
            for c in text_cols
        ),
        pl.col("answers")
        .list.eval(pl.element().str.contains(f"^[{INVISIBLE_EDGES}]|[{INVISIBLE_EDGES}]$"))
        .list.any()
        .fill_null(False),
    )
    if not df.select(has.any()).item():
        return df
    rows = df.to_dicts()
    for row in rows:
        for c in ("title", "question"):
            row[c] = _strip_edges(row[c])[0]
        row["context"], shift = _strip_edges(row["context"])
        if row["answers"] is None:
            continue
        answers, starts = [], list(row["answer_starts"] or [])
        for n, answer in enumerate(row["answers"]):
            answer, lead = _strip_edges(answer)
            answers.append(answer)
            if n < len(starts) and starts[n] is not None and starts[n] >= 0:
                starts[n] = max(0, starts[n] - shift + lead)
        row["answers"] = answers
        if row["answer_starts"] is not None:
            row["answer_starts"] = starts
    return pl.DataFrame(rows, schema=RAW_SCHEMA)
