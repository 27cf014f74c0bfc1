"""How closely two engines' log rows agree on the same items (engines/__init__.py).

`parity(a, b)` compares two evaluations' rows (LOG_SCHEMA) item by item and returns one
measure per line: what share of greedy answers are identical per format, whether mc picks the
same option and by how much the option log-likelihoods differ, whether the gold's first-token
rank is the same, and whether the recovery decodes recover the same items (beams and samples
are compared by their statistics: vLLM's beam search and sampler are not the native engine's,
so single hypotheses may differ while the share of recovered items must not).
"""

from __future__ import annotations

import polars as pl

GREEDY = ("open", "candidates", "oneshot")


def _by_item(df: pl.DataFrame, fmt: str, decode: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    rows = df.filter((pl.col("format") == fmt) & (pl.col("decode") == decode)).sort(
        ["item_id", "sample"]
    )
    for r in rows.to_dicts():
        out.setdefault(r["item_id"], []).append(r)
    return out


def parity(a: pl.DataFrame, b: pl.DataFrame) -> list[dict]:
    """Measures of agreement of evaluations `a` and `b` (rows: measure, agree, of, value,
    differ: the item ids that disagree, at most 10)."""
    out = []

    def add(measure, same: list[str], of: list[str], value=None):
        differ = sorted(set(of) - set(same))
        out.append(dict(measure=measure, agree=len(same), of=len(of), value=value, differ=differ))

    for fmt in GREEDY:
        x, y = _by_item(a, fmt, "greedy"), _by_item(b, fmt, "greedy")
        both = sorted(set(x) & set(y))
        if not both:
            continue
        add(
            f"{fmt}: identical greedy answers",
            [i for i in both if x[i][0]["output"] == y[i][0]["output"]],
            both,
        )
        add(
            f"{fmt}: same verdict (correct)",
            [i for i in both if x[i][0]["correct"] == y[i][0]["correct"]],
            both,
        )
    for fmt in ("mc", "mc_nopassage"):
        x, y = _by_item(a, fmt, "loglik"), _by_item(b, fmt, "loglik")
        both = sorted(set(x) & set(y))
        if not both:
            continue
        diff = max(
            abs(p - q)
            for i in both
            for p, q in zip(x[i][0]["option_ll"], y[i][0]["option_ll"], strict=True)
        )
        add(
            f"{fmt}: same argmax (largest option log-likelihood difference, nats)",
            [i for i in both if x[i][0]["pred_option"] == y[i][0]["pred_option"]],
            both,
            diff,
        )
    x, y = _by_item(a, "open", "greedy"), _by_item(b, "open", "greedy")
    both = sorted(i for i in set(x) & set(y) if x[i][0]["gold_rank"] is not None)
    if both:
        diff = max(abs(x[i][0]["gold_logprob"] - y[i][0]["gold_logprob"]) for i in both)
        add(
            "open: same gold first-token rank (largest log-prob difference, nats)",
            [i for i in both if x[i][0]["gold_rank"] == y[i][0]["gold_rank"]],
            both,
            diff,
        )
    for decode in ("beam", "sample"):
        x, y = _by_item(a, "open", decode), _by_item(b, "open", decode)
        both = sorted(set(x) & set(y))
        if not both:
            continue
        rx = {i for i in both if any(r["correct"] for r in x[i])}
        ry = {i for i in both if any(r["correct"] for r in y[i])}
        add(
            f"{decode}: same items recovered (any {decode} correct; rates a / b)",
            [i for i in both if (i in rx) == (i in ry)],
            both,
            f"{len(rx) / len(both):.2f} / {len(ry) / len(both):.2f}",
        )
        if decode == "beam":
            add(
                "beam: identical top beam",
                [i for i in both if x[i][0]["output"] == y[i][0]["output"]],
                both,
            )
        else:
            share = [sum(r["correct"] for r in v[i]) / len(v[i]) for v in (x, y) for i in both]
            half = len(both)
            add(
                "sample: share of correct samples (mean a / b)",
                both,
                both,
                f"{sum(share[:half]) / half:.2f} / {sum(share[half:]) / half:.2f}",
            )
    return out


def table(measures: list[dict]) -> str:
    """A markdown table of `parity`'s measures."""
    lines = ["| measure | agree | of | value | items that differ |", "|---|---|---|---|---|"]
    for m in measures:
        v = m["value"]
        v = f"{v:.4f}" if isinstance(v, float) else ("" if v is None else str(v))
        differ = ", ".join(m["differ"][:10]) + (" ..." if len(m["differ"]) > 10 else "")
        lines.append(f"| {m['measure']} | {m['agree']} | {m['of']} | {v} | {differ} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- both engines on one item table


def run_both(
    model_dir: str,
    items_path: str,
    out_dir: str,
    *,
    n: int | None = None,
    vllm_runs: int = 2,
    speed: bool = True,
    seed: int = 1234,
    device: str = "cpu",
    reps: int = 1,
    forbid_n: int = 4,
    recovery: bool = True,
) -> dict:
    """Evaluate the items of `items_path` (the first n) with the native engine once and the
    vLLM engine `vllm_runs` times, in every format, with every recovery decode on every item
    (scope 'all'); write native.parquet and vllm<k>.parquet to out_dir, and
    native_forbid.parquet and vllm_forbid.parquet: the first `forbid_n` items in `open` and
    `mc` with beams and samples, every decode forbidden each gold's first tokens (the positive
    control's setting). With `speed`, also
    time each engine on mc alone, on the greedy `open` decode alone and on the beams and
    samples alone (the same items, one after the other; the median of `reps`). Runs where
    vLLM is installed (engines.vllm_python); returns {"seconds": {engine: {phase: s}},
    "load": {engine: s}}.
    """
    import dataclasses
    import time
    from pathlib import Path

    from benchmark_illusion.evaluation.decoding import RowContext, Tokens
    from benchmark_illusion.evaluation.evaluate import RunMeta, evaluate_items
    from benchmark_illusion.evaluation.recovery import recovery_rows
    from benchmark_illusion.evaluation.settings import FORMATS, EvalSettings, RecoverySettings
    from benchmark_illusion.evaluation.steps import vllm_engine
    from benchmark_illusion.models.checkpoints import load_checkpoint

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = pl.read_parquet(items_path)
    items = table.head(n) if n else table
    exemplars = {r["item_id"]: r for r in table.to_dicts()}
    full = EvalSettings(
        formats=FORMATS,
        max_new_tokens=24,
        seed=seed,
        recovery=RecoverySettings(scope="all") if recovery else RecoverySettings.only(),
    )
    if any(r.get("exemplar_id") not in exemplars for r in items.to_dicts()):
        # a subset without its 1-shot exemplars (make bench's items): no one-shot decode
        full = dataclasses.replace(full, recovery=dataclasses.replace(full.recovery, oneshot=False))
    meta = RunMeta("parity", dataset="parity", lang="-")
    timing: dict = {"seconds": {}, "load": {}, "items": items.height}

    def phases(eng, tok, name):
        if not speed:
            return
        secs: dict[str, list[float]] = {"mc": [], "greedy": [], "recovery": []}
        rec = dataclasses.replace(full, recovery=RecoverySettings.only("beam", "sample"))
        base = dict(model="parity", method="dense", structure="none", sparsity=0.0, bits=None)
        base.update(dataset="parity", lang="-", seed=seed, model_hash="", config_hash="")
        toks = Tokens(tok, rec.prompt)
        for _ in range(reps):
            for phase, fmts in (("mc", ("mc",)), ("greedy", ("open",))):
                s = dataclasses.replace(full, formats=fmts, recovery=RecoverySettings.only())
                t0 = time.perf_counter()
                evaluate_items(eng, tok, items, s, meta, progress=False)
                secs[phase].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            recovery_rows(eng, RowContext(toks, rec, base), items.to_dicts(), progress=False)
            secs["recovery"].append(time.perf_counter() - t0)
        timing["seconds"][name] = {k: sorted(v)[len(v) // 2] for k, v in secs.items()}

    t0 = time.perf_counter()
    model, tok = load_checkpoint(model_dir, "float32", device)
    timing["load"]["native"] = time.perf_counter() - t0
    from benchmark_illusion.evaluation.engines.native import as_engine

    eng = as_engine(model, tok, full)
    evaluate_items(eng, tok, items, full, meta, False, exemplars).write_parquet(
        out / "native.parquet"
    )
    forbid = dataclasses.replace(
        full,
        formats=("open", "mc"),
        recovery=RecoverySettings(oneshot=False, scope="all"),
        forbid_gold_first_token=True,
    )
    few = items.head(forbid_n)
    if forbid_n:
        evaluate_items(eng, tok, few, forbid, meta, False).write_parquet(
            out / "native_forbid.parquet"
        )
    phases(eng, tok, "native")
    del model, eng
    t0 = time.perf_counter()
    eng, tok = vllm_engine(model_dir, "float32", device, seed, False)
    timing["load"]["vllm"] = time.perf_counter() - t0
    try:
        for k in range(1, vllm_runs + 1):
            df = evaluate_items(eng, tok, items, full, meta, False, exemplars)
            df.write_parquet(out / f"vllm{k}.parquet")
        if forbid_n:
            evaluate_items(eng, tok, few, forbid, meta, False).write_parquet(
                out / "vllm_forbid.parquet"
            )
        phases(eng, tok, "vllm")
    finally:
        eng.close()
    return timing


def main(argv=None) -> int:
    import argparse
    import json
    from pathlib import Path

    from benchmark_illusion import logs

    p = argparse.ArgumentParser(description=run_both.__doc__)
    p.add_argument("model_dir", nargs="?")
    p.add_argument("items", nargs="?")
    p.add_argument("out_dir")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--vllm-runs", type=int, default=2)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--no-recovery", action="store_true", help="no beams, samples, one-shot")
    p.add_argument("--forbid-n", type=int, default=4, help="items of the forbid setting")
    p.add_argument("--report", action="store_true", help="print the tables of OUT_DIR; run nothing")
    a = p.parse_args(argv)
    if not a.report:
        logs.to_file(None)
        timing = run_both(
            a.model_dir,
            a.items,
            a.out_dir,
            n=a.n,
            vllm_runs=a.vllm_runs,
            speed=not a.no_speed,
            device=a.device,
            reps=a.reps,
            forbid_n=0 if a.no_recovery else a.forbid_n,
            recovery=not a.no_recovery,
        )
        Path(a.out_dir, "timing.json").write_text(json.dumps(timing, indent=1))
    print(report(a.out_dir))
    return 0


def report(out_dir) -> str:
    """The parity table (native against vLLM, and vLLM against itself) and the speed table of a
    run_both folder."""
    import json
    from pathlib import Path

    out = Path(out_dir)
    native, first = pl.read_parquet(out / "native.parquet"), pl.read_parquet(out / "vllm1.parquet")
    text = ["native against vLLM:", table(parity(native, first))]
    if (out / "vllm2.parquet").is_file():
        second = pl.read_parquet(out / "vllm2.parquet")
        same = first.drop("seconds").equals(second.drop("seconds"), null_equal=True)
        text.append(f"vLLM run twice: {'identical rows' if same else 'rows DIFFER'}")
    timing = (
        json.loads((out / "timing.json").read_text()) if (out / "timing.json").is_file() else {}
    )
    secs, n = timing.get("seconds", {}), timing.get("items", 0)
    if {"native", "vllm"} <= set(secs):
        text += [
            "",
            f"speed ({n} items, items/s; load: native {timing['load']['native']:.1f} s, "
            f"vLLM {timing['load']['vllm']:.1f} s):",
            "| phase | native | vLLM | vLLM / native |",
            "|---|---|---|---|",
        ]
        for phase in ("mc", "greedy", "recovery"):
            a, b = n / secs["native"][phase], n / secs["vllm"][phase]
            text.append(f"| {phase} | {a:.2f} | {b:.2f} | {b / a:.2f}x |")
    return "\n".join(text)


if __name__ == "__main__":  # vLLM starts worker processes
    import sys

    sys.exit(main())
