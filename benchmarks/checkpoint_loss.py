"""Held-out loss of every checkpoint a pipeline run produced (results/checkpoints/...).

  .venv/bin/python benchmarks/checkpoint_loss.py --text ../shared/data/xquad/xquad.en.json

Windows come from the passages of a SQuAD-JSON file (seeded); prints one row per checkpoint
with loss, perplexity and the ratio of perplexity to the dense model's.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from benchmark_illusion.compression.calibration import make_windows
from benchmark_illusion.models.checkpoints import load_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--text", type=Path, default=Path("../shared/data/xquad/xquad.en.json"))
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    args = ap.parse_args()

    data = json.loads(args.text.read_text())["data"]
    docs = sorted({p["context"] for d in data for p in d["paragraphs"]})
    dense = Path("resources/models") / args.model
    paths = [("dense", "none", "0", dense)] + [
        (p.parts[-3], p.parts[-2], p.parts[-1], p)
        for p in sorted(Path("results/checkpoints", args.model).glob("*/*/*"))
        if (p / "config.json").is_file()
    ]
    base = None
    print(
        "| method | structure | sparsity | held-out loss | ppl | ppl / dense |\n"
        "|---|---|---|---|---|---|"
    )
    for method, structure, sparsity, path in paths:
        model, tok = load_checkpoint(path)
        held = make_windows(docs, tok, args.windows, args.seq_len, seed=99)
        with torch.no_grad():
            loss = sum(
                float(model(input_ids=held[i : i + 8], labels=held[i : i + 8]).loss)
                * len(held[i : i + 8])
                for i in range(0, len(held), 8)
            ) / len(held)
        base = base or math.exp(loss)
        print(
            f"| {method} | {structure} | {sparsity} | {loss:.3f} | {math.exp(loss):.1f} "
            f"| {math.exp(loss) / base:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
