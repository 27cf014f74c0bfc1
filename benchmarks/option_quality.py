"""How answer-like the multiple-choice options are: options by source, by kind, and how many
start or end with a function word of their language, per benchmark.

    .venv/bin/python benchmarks/option_quality.py     # the shipped sample set
    .venv/bin/python benchmarks/option_quality.py --xquad ../shared/data/xquad --langs en zh th
    .venv/bin/python benchmarks/option_quality.py --src /path/to/other/checkout/src ...

Items are built the way the pipeline builds them (`data.items.build_items`, `items.distractors:
passage`, seed 1234) from every valid row of each file (XQuAD: the first `--rows` rows); the
table is `data.items.option_quality_rows`, the rows of the database's `option_quality` table.
With `--src`, the items are built by the package found under that folder (another version of
this project, in a subprocess) and judged by this one, so that two versions' options are
counted by one rule. Prints a Markdown table; the XQuAD files are read in place, never copied.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from benchmark_illusion.data.items import (  # noqa: E402
    build_items,
    option_quality_rows,
    validate_rows,  # noqa: E402
)
from benchmark_illusion.data.loaders import load_raw  # noqa: E402

BUILD = """
import json, sys
from benchmark_illusion.data.items import build_items, validate_rows
from benchmark_illusion.data.loaders import load_raw
path, lang, rows, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
good, _ = validate_rows(load_raw({"source": "squad_json", "path": path}, lang), extractive=True)
items, report = build_items(good.head(rows) if rows else good, seed=1234)
items.write_parquet(out)
print(json.dumps({"too_few": report["too_few_distractors"], "n": report["n_items"]}))
"""


def build(path: str, lang: str, rows: int, src: str | None) -> tuple[list[dict], dict]:
    if src is None:
        good, _ = validate_rows(
            load_raw({"source": "squad_json", "path": path}, lang), extractive=True
        )
        items, report = build_items(good.head(rows) if rows else good, seed=1234)
        return items.to_dicts(), {"too_few": report["too_few_distractors"], "n": report["n_items"]}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "items.parquet")
        env = {**os.environ, "PYTHONPATH": src}
        res = subprocess.run(
            [sys.executable, "-c", BUILD, path, lang, str(rows), out],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return pl.read_parquet(out).to_dicts(), json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xquad", help="folder of xquad.<lang>.json files (read in place)")
    ap.add_argument("--langs", nargs="+", default=["en", "es", "de", "zh", "th"])
    ap.add_argument("--rows", type=int, default=600, help="XQuAD rows per language (0: all)")
    ap.add_argument("--src", help="build the items with the package under this folder")
    args = ap.parse_args()
    sources = [
        (f"sample {lang}", str(ROOT / "resources/sample_qa" / f"{lang}.json"), lang, 0)
        for lang in ("en", "de", "es")
    ]
    if args.xquad:
        sources += [
            (f"XQuAD {lang}", str(Path(args.xquad) / f"xquad.{lang}.json"), lang, args.rows)
            for lang in args.langs
        ]
    print(
        "| benchmark | items | dropped (too few) | distractors | answer | span | "
        "number / name / other | function-word edge: answer | span | all distractors | gold |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, path, lang, rows in sources:
        items, info = build(path, lang, rows, args.src)
        table = option_quality_rows(items)
        dis = [r for r in table if r["source"] != "gold"]
        gold = [r for r in table if r["source"] == "gold"]
        n = sum(r["n_options"] for r in dis)
        by_src = {
            s: sum(r["n_options"] for r in dis if r["source"] == s) for s in ("answer", "span")
        }
        by_kind = [
            sum(r["n_options"] for r in dis if r["kind"] == k) for k in ("number", "name", "other")
        ]
        edge = sum(r["n_function_edge"] for r in dis)
        e_src = {
            s: sum(r["n_function_edge"] for r in dis if r["source"] == s)
            for s in ("answer", "span")
        }
        g_edge = sum(r["n_function_edge"] for r in gold)
        g_n = sum(r["n_options"] for r in gold)
        print(
            f"| {name} | {info['n']} | {info['too_few']} | {n} | {by_src['answer']} | "
            f"{by_src['span']} | {' / '.join(map(str, by_kind))} | {e_src['answer']} | "
            f"{e_src['span']} | {edge} ({edge / max(n, 1):.1%}) | {g_edge} of {g_n} |"
        )


if __name__ == "__main__":
    main()
