"""Compare two pipeline output trees (working directories) file by file and table by table:
is a refactor free of any change to the outputs?

Parquet: schema and every row in stored order (columns named `seconds` aside: wall time).
safetensors: every tensor bit for bit, metadata as a mapping (key order is hash-map order).
JSON: parsed, keys naming timings aside. DuckDB: DESCRIBE and every row of every base table in
stored order. Anything else: byte for byte. Exit status 1 when anything differs.

Run both pipelines with the same core count (SparseGPT, GPTQ and the SAE take up to 4 threads,
capped at --cores, and their weights differ between thread counts; docs/design.md,
Determinism) and with DuckDB on one thread, so that float sums and the stored order of tables
without ORDER BY are reproducible:

  PYTHONPATH=benchmarks/duckdb_one_thread:src .venv/bin/snakemake --cores 2 -d BEFORE ...
  (the same for AFTER, from the other commit's worktree)
  .venv/bin/python benchmarks/compare_runs.py BEFORE AFTER
"""

import json
import sys
from pathlib import Path

import duckdb
import polars as pl
import torch
from safetensors import safe_open

TIMING = {"seconds", "wall_seconds", "elapsed", "elapsed_s", "train_seconds"}


def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k not in TIMING and "seconds" not in k}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o


def parquet_same(a, b):
    x, y = pl.read_parquet(a), pl.read_parquet(b)
    drop = [c for c in x.columns if c == "seconds" or c.endswith("_seconds")]
    x, y = x.drop(drop), y.drop([c for c in drop if c in y.columns])
    if x.schema != y.schema:
        return f"schema {x.schema} != {y.schema}"
    return None if x.equals(y, null_equal=True) else "rows differ"


def st_same(a, b):
    with safe_open(a, "pt") as x, safe_open(b, "pt") as y:
        if x.metadata() != y.metadata():
            return "metadata differs"
        if sorted(x.keys()) != sorted(y.keys()):
            return "tensor names differ"
        for k in x.keys():
            t, u = x.get_tensor(k), y.get_tensor(k)
            if t.dtype != u.dtype or t.shape != u.shape:
                return f"{k}: dtype/shape"
            if not torch.equal(t.contiguous().view(torch.uint8), u.contiguous().view(torch.uint8)):
                return f"{k}: bits differ"
    return None


def db_tables(path):
    con = duckdb.connect(str(path), read_only=True, config={"threads": 1})
    names = [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' ORDER BY 1"
        ).fetchall()
    ]
    out = {}
    for n in names:
        desc = con.execute(f'DESCRIBE "{n}"').fetchall()
        cols = [d[0] for d in desc if d[0] != "seconds" and not d[0].endswith("_seconds")]
        rows = con.execute(
            f'SELECT {", ".join(chr(34) + c + chr(34) for c in cols)} FROM "{n}"'
        ).fetchall()
        out[n] = (desc, rows, len(cols) != len(desc))
    con.close()
    return out


def outputs(root: Path) -> set[Path]:
    """Every output file under a working directory (rule logs and Snakemake's state aside)."""
    return {
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file() and "logs" not in p.parts and ".snakemake" not in p.parts
    }


def main(before, after):
    before, after = Path(before), Path(after)
    files = outputs
    fa, fb = files(before), files(after)
    counts, bad = {}, []
    if fa != fb:
        only_a, only_b = sorted(fa - fb)[:10], sorted(fb - fa)[:10]
        bad.append(f"file sets differ: only before {only_a}, only after {only_b}")
    for rel in sorted(fa & fb):
        a, b = before / rel, after / rel
        kind = rel.suffix
        if kind == ".parquet":
            why = parquet_same(a, b)
        elif kind == ".safetensors":
            why = st_same(a, b)
        elif kind == ".json":
            why = (
                None
                if strip(json.loads(a.read_text())) == strip(json.loads(b.read_text()))
                else "differs"
            )
        elif kind == ".duckdb":
            ta, tb = db_tables(a), db_tables(b)
            why = None
            if set(ta) != set(tb):
                why = f"tables differ {set(ta) ^ set(tb)}"
            for t in sorted(set(ta) & set(tb)):
                counts["duckdb table"] = counts.get("duckdb table", 0) + 1
                if ta[t][2]:
                    counts["duckdb table with a seconds column left out"] = (
                        counts.get("duckdb table with a seconds column left out", 0) + 1
                    )
                if ta[t][0] != tb[t][0]:
                    bad.append(f"{rel}:{t}: DESCRIBE differs")
                elif ta[t][1] != tb[t][1]:
                    same_sorted = sorted(map(repr, ta[t][1])) == sorted(map(repr, tb[t][1]))
                    how = "same rows, other order" if same_sorted else "values"
                    bad.append(f"{rel}:{t}: rows differ ({how})")
        else:
            why = None if a.read_bytes() == b.read_bytes() else "bytes differ"
            kind = kind or "(no suffix)"
        counts[kind] = counts.get(kind, 0) + 1
        if why:
            bad.append(f"{rel}: {why}")
    for k, v in sorted(counts.items()):
        print(f"{k:>45}: {v} compared")
    print("differences:", len(bad))
    for b in bad:
        print("  ", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
