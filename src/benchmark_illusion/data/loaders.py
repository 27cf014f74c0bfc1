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

from collections.abc import Callable

import polars as pl

from benchmark_illusion.data.local import (
    conform,
    load_jsonl,
    load_parquet,
    load_squad_json,
    require_columns,
)
from benchmark_illusion.data.raw import FLAT_REQUIRED, LOCAL_SOURCES, DatasetError, source_name

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

# --------------------------------------------------------------------------- dispatch


def load_raw(cfg: dict, lang: str) -> pl.DataFrame:
    """Load language `lang` of the dataset described by `cfg` as a frame with exactly RAW_SCHEMA.

    Every row of the source (for that language) is returned, in source order; `lang`
    is set to the requested language. Raises DatasetError when the source is unusable.
    """
    return _LOADERS[source_name(cfg)](cfg, lang)


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
    require_columns(df.columns, ("id",), where)
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
    require_columns(df.columns, FLAT_REQUIRED, where)
    answers = df.schema["answers"]
    fields = {f.name for f in answers.fields} if isinstance(answers, pl.Struct) else set()
    if not {"text", "answer_start"} <= fields:
        raise DatasetError(
            f"{where}: column 'answers' should be a struct of text and answer_start, got {answers}"
        )
    title = pl.col("title") if "title" in df.columns else pl.lit("")
    return conform(
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


_LOADERS: dict[str, Callable[[dict, str], pl.DataFrame]] = {
    "xquad_hub": load_xquad_hub,
    "tydiqa_hub": load_tydiqa_hub,
    "squad_json": load_squad_json,
    "jsonl": load_jsonl,
    "parquet": load_parquet,
}
