"""The paper grid's cost in GPU-hours, with `generate` and with the shared-prefill engine, from the
token counts a real run measured per item, format and decode, times a stated GPU throughput.

    .venv/bin/python benchmarks/gpu_hours.py RUN_DIR [--mfu 0.5] [--hbm 0.7] [--step-ms 2]

RUN_DIR is a finished run whose recovery scope was `all` (every decode on every selected item),
e.g. the XQuAD realism run; its logs give, per item, the prompt tokens of each format and the
tokens each decode wrote, and the batches are rebuilt from them exactly as each engine builds
them (the output calls the two engines `before` and `after`; docs/performance.md):

  before  fixed batches of `batch_size` prompts (sorted by budget, then length), left-padded to
          the longest; beams and samples by `generate`, which runs the prompt once per beam and
          once per sample; every decode steps until the batch's longest row is done;
  after   greedy formats: batches cut before a prompt 1.25x longer than their first, rows
          stacked up to `decode_rows` per decode step; every prefill runs the prompts' shared
          head once per batch; one prefill for all beams and samples (recovery batches are
          still cut by budget, as with `generate`).

Cost model per forward (stated, not measured on a GPU):
  prefill  2 x parameters FLOPs per padded token at `mfu` of the GPU's dense bf16 peak;
  decode   one step reads every weight once plus each row's KV cache, at `hbm` of the GPU's
           memory bandwidth, plus `step_ms` of launch overhead.
The paper models' shapes are below; their prompt lengths are taken from the run's tokenizer (the
bundled model's), so the figures are for the paper's grid at this run's token counts.
"""

from __future__ import annotations

import argparse
import glob
import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

# H100 SXM: dense bf16 peak and HBM3 bandwidth
GPU = {"name": "H100 SXM", "tflops": 989.0, "tbps": 3.35}


@dataclass(frozen=True)
class Shape:
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int

    def kv_bytes_per_token(self) -> float:  # keys and values, bf16
        return self.layers * 2 * self.kv_heads * self.head_dim * 2


PAPER_MODELS = {
    "qwen3-8b": Shape(8.2, 36, 8, 128),
    "mistral-7b-instruct-v0.3": Shape(7.25, 32, 8, 128),
    "phi-3-mini-4k-instruct": Shape(3.82, 32, 32, 96),
}
# config/paper.yaml: 21 languages, pool of 600 per language, up to 200 selected, 25 checkpoints
# (dense; magnitude, Wanda, SparseGPT at 5 sparsities and 2:4; RTN and GPTQ at 8, 4, 3 bits)
LANGUAGES, POOL, SELECTED, CHECKPOINTS = 21, 600, 200, 25
BATCH, DECODE_ROWS, BEAMS, SAMPLES, SLACK = 32, 64, 5, 10, 1.25


def _batches(lengths: list[int], keys: list, size: int, slack: float | None) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda i: (keys[i], lengths[i]))
    out: list[list[int]] = []
    for i in order:
        b = out[-1] if out else None
        if (
            b is None
            or len(b) == size
            or keys[i] != keys[b[0]]
            or (slack and lengths[i] > slack * lengths[b[0]])
        ):
            out.append([i])
        else:
            b.append(i)
    return out


@dataclass
class Work:
    """Padded prefill tokens and decode steps (with the rows each step holds)."""

    prefill_tokens: float = 0.0
    steps: list = None  # (n_steps, rows, context)

    def __post_init__(self):
        self.steps = self.steps or []


def _prefill(work: Work, prompts: list[int], batch: list[int], copies: int, head: int) -> None:
    width = max(prompts[i] for i in batch)
    if head:
        work.prefill_tokens += head + len(batch) * (width - head)
    else:
        work.prefill_tokens += copies * len(batch) * width


def item_work(df: pl.DataFrame, head: int, before: bool) -> Work:
    """The forwards one checkpoint's evaluation of these items takes (every format, every
    decode: recovery scope all)."""
    w = Work()
    for fmt, decode, copies in (
        ("open", "greedy", 1),
        ("candidates", "greedy", 1),
        ("oneshot", "greedy", 1),
        ("open", "beam", BEAMS),
        ("open", "sample", SAMPLES),
    ):
        rows = df.filter((pl.col("format") == fmt) & (pl.col("decode") == decode))
        if rows.height == 0:
            continue
        per_item = rows.group_by("item_id", maintain_order=True).agg(
            pl.col("n_prompt_tokens").first(),
            pl.col("n_output_tokens").max().alias("longest"),
            pl.col("max_new_tokens").first(),
        )
        p, n, budget = (
            per_item[c].to_list() for c in ("n_prompt_tokens", "longest", "max_new_tokens")
        )
        shared = fmt == "open" and decode in ("beam", "sample") and not before
        if decode == "sample" and shared:
            continue  # the beams' prefill serves the samples too (counted once, under beam)
        # greedy formats: one budget per row, batches cut by length; recovery batches as before
        greedy_after = decode == "greedy" and not before
        keys = [0] * len(p) if greedy_after else budget
        batches = _batches(p, keys, BATCH, SLACK if greedy_after else None)
        for b in batches:
            _prefill(w, p, b, copies if before else 1, 0 if before else head)
        rows_per_item = {"beam": BEAMS, "sample": SAMPLES}.get(decode, 1)
        if decode == "greedy" and not before:
            groups, cur = [], []
            for b in batches:
                cur += b
                if len(cur) >= DECODE_ROWS:
                    groups.append(cur)
                    cur = []
            groups += [cur] if cur else []
        else:
            groups = batches
        for g in groups:
            steps = max(n[i] for i in g)
            ctx = max(p[i] for i in g) + steps / 2
            w.steps.append((steps, len(g) * rows_per_item, ctx))
        if decode == "beam" and not before:  # the samples decode from the same prefill
            srows = df.filter((pl.col("format") == "open") & (pl.col("decode") == "sample"))
            longest = dict(
                srows.group_by("item_id").agg(pl.col("n_output_tokens").max()).iter_rows()
            )
            ids = per_item["item_id"].to_list()
            for g in groups:
                steps = max(longest.get(ids[i], 0) for i in g)
                ctx = max(p[i] for i in g) + steps / 2
                w.steps.append((steps, len(g) * SAMPLES, ctx))
    return w


def seconds(w: Work, shape: Shape, mfu: float, hbm: float, step_ms: float) -> float:
    flops = 2 * shape.params_b * 1e9 * w.prefill_tokens
    t = flops / (GPU["tflops"] * 1e12 * mfu)
    weights = shape.params_b * 1e9 * 2
    for steps, rows, ctx in w.steps:
        read = weights + rows * ctx * shape.kv_bytes_per_token()
        t += steps * (read / (GPU["tbps"] * 1e12 * hbm) + step_ms / 1000)
    return t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--mfu", type=float, default=0.5, help="prefill share of the bf16 peak")
    p.add_argument("--hbm", type=float, default=0.7, help="decode share of the HBM bandwidth")
    p.add_argument(
        "--step-ms",
        type=float,
        default=25.0,
        help="per decode step: transformers eager, no CUDA graphs, ~32 layers",
    )
    p.add_argument("--head", type=int, default=47, help="prompt tokens every prompt shares")
    args = p.parse_args()
    files = glob.glob(str(args.run_dir / "results/generations/*/dense/none/0/*/*.parquet"))
    pools = glob.glob(str(args.run_dir / "results/pool/*/*/*.parquet"))
    if not files or not pools:
        raise SystemExit(f"{args.run_dir}: no dense generation logs or pools under results/")
    logs = [pl.read_parquet(f) for f in files]
    if not all({"beam", "sample"} <= set(d["decode"].unique()) for d in logs if d.height):
        raise SystemExit("the run's recovery scope must be `all` (beams and samples on every item)")
    pool = [pl.read_parquet(f) for f in pools]
    n_sel = sum(d["item_id"].n_unique() for d in logs)
    n_pool = sum(d["item_id"].n_unique() for d in pool)
    print(
        f"token counts from {len(files)} languages: {n_sel} selected items (every decode), "
        f"{n_pool} pool items; {GPU['name']} at {args.mfu:.0%} of {GPU['tflops']:.0f} TFLOP/s "
        f"(prefill) and {args.hbm:.0%} of {GPU['tbps']} TB/s (decode), "
        f"{args.step_ms} ms per step"
    )
    print()
    print(
        "| model | pool (before) | pool (after) | evaluate (before) | evaluate (after) "
        "| GPU-hours before | after | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    total = [0.0, 0.0]
    for name, shape in PAPER_MODELS.items():
        cost = {}
        for before in (True, False):
            sel = sum(
                seconds(item_work(d, args.head, before), shape, args.mfu, args.hbm, args.step_ms)
                for d in logs
            )
            pl_ = sum(
                seconds(item_work(d, args.head, before), shape, args.mfu, args.hbm, args.step_ms)
                for d in pool
            )
            # per item, scaled to the paper's grid
            per_sel, per_pool = sel / n_sel, pl_ / n_pool
            cost[before] = (
                per_pool * POOL * LANGUAGES / 3600,
                per_sel * SELECTED * LANGUAGES * CHECKPOINTS / 3600,
            )
        b, a = sum(cost[True]), sum(cost[False])
        total[0] += b
        total[1] += a
        print(
            f"| {name} | {cost[True][0]:.1f} | {cost[False][0]:.1f} | {cost[True][1]:.0f} "
            f"| {cost[False][1]:.0f} | {b:.0f} | {a:.0f} | {b / a:.2f}x |"
        )
    print(f"| all three | | | | | {total[0]:.0f} | {total[1]:.0f} | {total[0] / total[1]:.2f}x |")
    assert math.isfinite(total[1])


if __name__ == "__main__":
    main()
