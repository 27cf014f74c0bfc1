"""Dataset loaders: every QA source, reshaped into one raw polars schema.

Loaders only reshape. They never drop or repair rows (a later step counts bad rows,
and the counts are part of the evidence), with one exception: invisible characters at
either end of a text (a BOM, zero-width space, direction marks, word joiner; see
`strip_invisible_edges`) are removed, and the answer offsets shifted with them; they raise
`DatasetError` when a source cannot be read as QA data at all (missing file or column,
malformed JSON, a wrong top-level structure, no rows for the requested language, an
unreachable hub).

A dataset config is a dict; `cfg['source']` picks the loader:

    xquad_hub   Hugging Face Hub, `google/xquad`, config `xquad.{lang}`
    tydiqa_hub  Hugging Face Hub, `google-research-datasets/tydiqa`, config `secondary_task`
    squad_json  SQuAD v1.1 nested JSON (the XQuAD release files use it too)
    jsonl       one flat QA object per line
    parquet     flat QA rows in a Parquet file

Hub sources take optional `hub_id`, `split` (default 'validation') and `revision`;
local sources take `path`, a template in which '{lang}' is replaced by the language.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

RAW_SCHEMA = pl.Schema(
    {
        "id": pl.Utf8,
        "lang": pl.Utf8,
        "title": pl.Utf8,
        "context": pl.Utf8,
        "question": pl.Utf8,
        "answers": pl.List(pl.Utf8),
        "answer_starts": pl.List(pl.Int64),
    }
)

# Answer offset used when a local source gives no character offset for an answer.
MISSING_START = -1

XQUAD_LANGUAGES = ["ar", "de", "el", "en", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh"]

# TyDi QA names each row's language only through its id prefix ("arabic-123...-0").
TYDIQA_LANGUAGES = {
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

HUB_LANGUAGES = {
    "xquad_hub": list(XQUAD_LANGUAGES),
    "tydiqa_hub": sorted(TYDIQA_LANGUAGES.values()),
}

DEFAULT_HUB_IDS = {
    "xquad_hub": "google/xquad",
    "tydiqa_hub": "google-research-datasets/tydiqa",
}

HUB_SOURCES = ("xquad_hub", "tydiqa_hub")
LOCAL_SOURCES = ("squad_json", "jsonl", "parquet")
SOURCES = HUB_SOURCES + LOCAL_SOURCES

# Keys every flat (jsonl / parquet) row must carry; title, answer_starts and lang are optional.
FLAT_REQUIRED = ("id", "context", "question", "answers")


class DatasetError(ValueError):
    """A dataset source could not be read as QA data; the message names the source and the
    problem."""


# --------------------------------------------------------------------------- dispatch


def load_raw(cfg: dict, lang: str) -> pl.DataFrame:
    """Load language `lang` of the dataset described by `cfg` as a frame with exactly RAW_SCHEMA.

    Every row of the source (for that language) is returned, in source order; `lang`
    is set to the requested language. Raises DatasetError when the source is unusable.
    """
    return _LOADERS[_source(cfg)](cfg, lang)


def raw_path_for(cfg: dict, lang: str) -> str | None:
    """The local file `load_raw(cfg, lang)` reads, or None for hub sources.

    The path is the config's `path` with '{lang}' replaced and '~' expanded; the file
    need not exist yet (Snakemake uses this as a rule input, so edits retrigger).
    """
    source = _source(cfg)
    if source in HUB_SOURCES:
        return None
    template = cfg.get("path")
    if not isinstance(template, (str, os.PathLike)) or not str(template):
        raise DatasetError(
            f"dataset config with source {source!r} needs a 'path' (got {template!r})"
        )
    # str.replace rather than str.format: other braces in a path must stay literal.
    return os.path.expanduser(str(template).replace("{lang}", lang))


def _source(cfg: dict) -> str:
    """The config's source name, checked against SOURCES."""
    source = cfg.get("source")
    if source not in SOURCES:
        raise DatasetError(
            f"unknown dataset source {source!r}; expected one of {', '.join(SOURCES)}"
        )
    return source


# --------------------------------------------------------------------------- hub sources


def load_xquad_hub(cfg: dict, lang: str) -> pl.DataFrame:
    """XQuAD for `lang` from the hub (config 'xquad.{lang}'); title is '' (XQuAD has none)."""
    _check_hub_language("xquad_hub", lang)
    hub_id = cfg.get("hub_id", DEFAULT_HUB_IDS["xquad_hub"])
    table, where = _load_hub_table(cfg, hub_id, f"xquad.{lang}")
    return _frame_from_hub(pl.from_arrow(table), lang, where)


def load_tydiqa_hub(cfg: dict, lang: str) -> pl.DataFrame:
    """TyDi QA GoldP ('secondary_task') rows whose id prefix names `lang`."""
    _check_hub_language("tydiqa_hub", lang)
    hub_id = cfg.get("hub_id", DEFAULT_HUB_IDS["tydiqa_hub"])
    table, where = _load_hub_table(cfg, hub_id, "secondary_task")
    df = pl.from_arrow(table)
    _require_columns(df.columns, ("id",), where)
    codes = tydiqa_language_of(df["id"])
    rows = df.filter(codes == lang)
    if rows.height == 0:
        found = sorted(c for c in codes.unique().to_list() if c is not None)
        raise DatasetError(f"{where}: no rows for language {lang!r} (languages present: {found})")
    return _frame_from_hub(rows, lang, where)


def tydiqa_language_of(ids: pl.Series) -> pl.Series:
    """ISO code of each TyDi QA id (text before the first '-'); null when the prefix is unknown."""
    prefix = ids.cast(pl.Utf8).str.extract(r"^([^-]*)-", 1)
    return prefix.replace_strict(TYDIQA_LANGUAGES, default=None, return_dtype=pl.Utf8)


def _check_hub_language(source: str, lang: str) -> None:
    """Fail before any network access when the hub dataset has no such language."""
    if lang not in HUB_LANGUAGES[source]:
        raise DatasetError(
            f"source {source!r} has no language {lang!r} "
            f"(available: {', '.join(HUB_LANGUAGES[source])})"
        )


def _load_hub_table(cfg: dict, hub_id: str, config_name: str):
    """Run `datasets.load_dataset` for one config and split; return (arrow table, description).

    Hub and connection failures become DatasetError with a hint to use a local source.
    """
    # Imported here: `datasets` takes seconds to import and local sources never need it.
    import datasets

    split = cfg.get("split", "validation")
    where = f"hub dataset {hub_id!r} (config {config_name!r}, split {split!r})"
    try:
        ds = datasets.load_dataset(hub_id, config_name, split=split, revision=cfg.get("revision"))
    except _unreachable_errors() as e:
        raise DatasetError(
            f"{where}: the Hugging Face Hub could not be reached ({type(e).__name__}: {e}). "
            "Without internet access, download the data once and use a local source instead "
            f"(source: {' / '.join(LOCAL_SOURCES)} with a 'path')."
        ) from e
    except FileNotFoundError as e:
        raise DatasetError(f"{where}: not found on the hub or as a local folder ({e})") from e
    except ValueError as e:
        # e.g. "BuilderConfig 'xquad.xx' not found", "Unknown split".
        raise DatasetError(f"{where}: could not be loaded ({e})") from e
    return ds.with_format("arrow")[:], where


def _unreachable_errors() -> tuple[type[BaseException], ...]:
    """Exception types meaning "the hub could not be reached", from every layer that may raise them.

    `datasets` usually wraps these in ConnectionError, but the hub client and the
    HTTP libraries underneath can leak their own types, depending on versions.
    """
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from huggingface_hub.errors import (
            HfHubHTTPError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
        )

        errors += [OfflineModeIsEnabled, LocalEntryNotFoundError, HfHubHTTPError]
    except ImportError:
        pass
    try:
        import httpx

        errors.append(httpx.TransportError)
    except ImportError:
        pass
    try:
        import requests

        errors += [requests.exceptions.ConnectionError, requests.exceptions.Timeout]
    except ImportError:
        pass
    return tuple(errors)


def _frame_from_hub(df: pl.DataFrame, lang: str, where: str) -> pl.DataFrame:
    """Reshape hub rows (answers = struct {text: [...], answer_start: [...]}) into RAW_SCHEMA."""
    _require_columns(df.columns, FLAT_REQUIRED, where)
    answers = df.schema["answers"]
    fields = {f.name for f in answers.fields} if isinstance(answers, pl.Struct) else set()
    if not {"text", "answer_start"} <= fields:
        raise DatasetError(
            f"{where}: column 'answers' should be a struct of text and answer_start, got {answers}"
        )
    title = pl.col("title") if "title" in df.columns else pl.lit("")
    return _conform(
        df.select(
            id=pl.col("id"),
            lang=pl.lit(lang),
            title=title,
            context=pl.col("context"),
            question=pl.col("question"),
            answers=pl.col("answers").struct.field("text"),
            answer_starts=pl.col("answers").struct.field("answer_start"),
        ),
        where,
    )


# --------------------------------------------------------------------------- local sources


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
    _require_columns(df.columns, FLAT_REQUIRED, path)
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


def _require_columns(columns: Iterable[str], required: Iterable[str], where: str) -> None:
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
    return _conform(pl.DataFrame(columns, schema_overrides=RAW_SCHEMA), where)


def _conform(df: pl.DataFrame, where: str) -> pl.DataFrame:
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


_LOADERS: dict[str, Callable[[dict, str], pl.DataFrame]] = {
    "xquad_hub": load_xquad_hub,
    "tydiqa_hub": load_tydiqa_hub,
    "squad_json": load_squad_json,
    "jsonl": load_jsonl,
    "parquet": load_parquet,
}
