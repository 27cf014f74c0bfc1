"""`make bench`: the pipeline's evaluation and decoding against the tools people would use instead,
on the same items, the same model (the bundled one, imported once to safetensors), the same
machine, interleaved, several repetitions. Writes benchmarks/results/bench.csv and bench.md
(medians and ratios, peak memory) and prints the table.

Sections (--only a,b,...; all by default):
  mc        MC scoring vs lm-evaluation-harness `loglikelihood` on the same contexts and options:
            argmax agreement, largest per-option log-likelihood difference, items/s ratio
  greedy    greedy `open` answers vs lm-evaluation-harness `generate_until` (until a line
            break, the same budgets): identical first lines, items/s ratio
  recovery  5 beams + 10 samples per item vs transformers `generate` (benchmarks/
            recovery_decodes.py): identical hypotheses and draws, items/s ratio
  vllm      the native engine against the vLLM engine (vLLM's CPU build in .venv-vllm, made
            by `make vllm-venv`; both run there, on the same items, one after the other):
            items/s of mc, greedy `open` and the recovery decodes (5 beams + 10 samples),
            and the parity of their rows (engines/parity.py); the ratio column is
            native / vLLM
  prune     Wanda and SparseGPT (50% unstructured) vs llm-compressor `oneshot` on the same
            calibration windows (exchanged as a file; its own venv: it pins another
            transformers): time ratio, Wanda mask agreement, held-out perplexity of both
  quant     RTN and GPTQ (4 and 3 bits, asymmetric groups of 64: llm-compressor needs the
            group to divide every layer's 576 or 1536 columns) vs llm-compressor's GPTQModifier
            on the same calibration windows: time ratio, held-out perplexity of both (theirs
            computed by our code on the weights its fake quantization produces), the values
            per group of theirs, and the share of weights both put on the same value; the
            same for ours with gptq static_groups (llm-compressor's way of fixing the grids)
  flops     achieved forward FLOP/s of the evaluation loop as a share of this machine's fp32
            matmul FLOP/s, measured in the same run
  memory    peak RSS of evaluating the items (open, mc, candidates) against holding the model
            and one batch
  plan      `snakemake -n` of config/paper.yaml (1,400+ jobs): seconds
  aggregate every metric table over 10 million synthetic log rows (benchmarks/
            aggregate_scale.py, scale 10m): seconds and peak RSS
  run       the embedded `make run` pipeline end to end in a fresh folder at --cores 2, against
            a fixed reference time (PREVIOUS_RUN_MINUTES)

Items: XQuAD en from ../shared/data/xquad when present (read in place, never copied), the
shipped sample set otherwise. The anchors live in their own virtual environments under
benchmarks/ (ignored by git), created on first use with torch pinned to the project's CPU
build; the project's .venv is not touched.

  make bench                       # every section, 24 items, 2 repetitions
  .venv/bin/python benchmarks/bench.py --only mc,greedy --n 24 --reps 2
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
XQUAD = ROOT.parent / "shared" / "data" / "xquad" / "xquad.{lang}.json"
SAMPLE = ROOT / "resources" / "sample_qa" / "{lang}.json"
TORCH = "torch==2.13.0"  # the release .venv pins (a CPU build there); unpinned may pull CUDA
ANCHORS = {"lmeval": ["lm-eval[hf]==0.4.13"], "llmc": ["llmcompressor==0.14.0.1"]}
SECTIONS = (
    "mc",
    "greedy",
    "recovery",
    "vllm",
    "prune",
    "quant",
    "flops",
    "memory",
    "plan",
    "aggregate",
    "run",
)
# reference time of the embedded `make run` on 2 cores, in minutes: the baseline of section `run`
PREVIOUS_RUN_MINUTES = 29.0

sys.path.insert(0, str(BENCH))


def anchor_python(name: str) -> Path:
    """The anchor's own venv (created and filled on first use); returns its python."""
    venv = BENCH / f".venv-{name}"
    py = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.is_file():
        print(f"installing {name} into {venv} (once) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(py), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, TORCH], check=True)
        subprocess.run([*pip, *ANCHORS[name], TORCH], check=True)
        stamp.write_text(" ".join(ANCHORS[name]) + "\n")
    return py


def items_source() -> tuple[str, str]:
    if Path(str(XQUAD).format(lang="en")).is_file():
        return str(XQUAD), "XQuAD en"
    return str(SAMPLE), "sample en"


class Table:
    """Rows of the result table: one per (section, measure)."""

    def __init__(self):
        self.rows: list[dict] = []

    def add(self, section, measure, ours, theirs=None, unit="", note=""):
        ratio = ""
        if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and theirs:
            ratio = f"{ours / theirs:.2f}x"
        self.rows.append(
            dict(
                section=section,
                measure=measure,
                ours=ours,
                theirs=theirs,
                ratio=ratio,
                unit=unit,
                note=note,
            )
        )
        print(
            f"  {section:9} {measure:38} {_fmt(ours):>10} {_fmt(theirs):>10} {ratio:>7}  "
            f"{unit} {note}",
            flush=True,
        )

    def speed(self, section: str, n: int, ours: list[float], theirs: list[float], note: str):
        """items/s of both from their repetitions' wall times (median)."""
        self.add(
            section,
            "items/s (median)",
            n / statistics.median(ours),
            n / statistics.median(theirs),
            "items/s",
            note,
        )

    def write(self, header: str) -> str:
        RESULTS.mkdir(parents=True, exist_ok=True)
        with open(RESULTS / "bench.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(self.rows[0]))
            w.writeheader()
            w.writerows(self.rows)
        lines = [
            header,
            "",
            "| section | measure | ours | anchor | ratio | unit | note |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            lines.append(
                f"| {r['section']} | {r['measure']} | {_fmt(r['ours'])} | {_fmt(r['theirs'])} | "
                f"{r['ratio']} | {r['unit']} | {r['note']} |"
            )
        text = "\n".join(lines) + "\n"
        (RESULTS / "bench.md").write_text(text)
        return text


def _fmt(x) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def our_eval(model, tok, items, formats, batch_size):
    """Our evaluation of `items` in `formats` (no recovery): (log, seconds)."""
    from benchmark_illusion.evaluation.evaluate import EvalSettings, RunMeta, evaluate_items
    from benchmark_illusion.evaluation.settings import RecoverySettings

    s = EvalSettings(formats=formats, batch_size=batch_size, recovery=RecoverySettings.only())
    t0 = time.perf_counter()
    log = evaluate_items(model, tok, items, s, RunMeta("bench"), progress=False)
    return log, time.perf_counter() - t0


def lmeval(model_dir, requests: dict, args) -> dict:
    py = anchor_python("lmeval")
    with tempfile.TemporaryDirectory() as tmp:
        req, out = Path(tmp) / "req.json", Path(tmp) / "out.json"
        req.write_text(json.dumps(requests))
        cmd = [
            str(py),
            str(BENCH / "anchors" / "lmeval_worker.py"),
            str(model_dir),
            str(req),
            str(out),
            "--batch-size",
            str(args.lmeval_batch),
            "--gen-batch-size",
            str(args.batch_size),
        ]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def prompts(tok, items, fmt="open"):
    """Prompt texts and the continuation separator, as the pipeline builds them."""
    from benchmark_illusion.evaluation.prompts import PromptSettings, build_prompt

    ps = PromptSettings()
    return [build_prompt(tok, ps, r, fmt) for r in items.to_dicts()], ps.continuation_sep


def section_mc(table, model, tok, model_dir, items, args):
    texts, sep = prompts(tok, items)
    rows = items.to_dicts()
    req = {
        "loglikelihood": [
            [t, sep + o] for t, r in zip(texts, rows, strict=True) for o in r["options"]
        ]
    }
    ours_t, theirs_t = [], []
    for _ in range(args.reps):
        log, sec = our_eval(model, tok, items, ("mc",), args.batch_size)
        ours_t.append(sec)
        res = lmeval(model_dir, req, args)
        theirs_t.append(res["loglikelihood"]["seconds"])
    mc = {r["item_id"]: r for r in log.filter(log["format"] == "mc").to_dicts()}
    ll = res["loglikelihood"]["results"]
    agree, diff, at = 0, 0.0, 0
    for r in rows:
        k = len(r["options"])
        theirs = ll[at : at + k]
        at += k
        ours = mc[r["item_id"]]["option_ll"]
        agree += max(range(k), key=lambda j: ours[j]) == max(range(k), key=lambda j: theirs[j])
        diff = max(diff, max(abs(a - b) for a, b in zip(ours, theirs, strict=True)))
    n = len(rows)
    table.speed("mc", n, ours_t, theirs_t, f"lm-eval batch {args.lmeval_batch}")
    table.add("mc", "argmax agreement", agree, n, "items")
    table.add("mc", "largest option log-likelihood difference", diff, None, "nats")


def section_greedy(table, model, tok, model_dir, items, args):
    texts, _ = prompts(tok, items)
    ours_t, theirs_t = [], []
    for _ in range(args.reps):
        log, sec = our_eval(model, tok, items, ("open",), args.batch_size)
        ours_t.append(sec)
        opened = {r["item_id"]: r for r in log.filter(log["format"] == "open").to_dicts()}
        req = {
            "generate_until": [
                [t, opened[r["item_id"]]["max_new_tokens"]]
                for t, r in zip(texts, items.to_dicts(), strict=True)
            ]
        }
        res = lmeval(model_dir, req, args)
        theirs_t.append(res["generate_until"]["seconds"])
    gens = res["generate_until"]["results"]
    same, leading = 0, 0
    for r, g in zip(items.to_dicts(), gens, strict=True):
        ours = opened[r["item_id"]]["output"]
        first = next((line for line in ours.split("\n") if line.strip()), "")
        same += first.strip() == g.strip()
        leading += ours.startswith("\n") or ours.startswith(" \n")
    n = len(texts)
    table.speed("greedy", n, ours_t, theirs_t, f"batch {args.batch_size}")
    table.add(
        "greedy",
        "identical first lines",
        same,
        n,
        "items",
        f"{leading} ours start with a blank line (lm-eval stops there)",
    )


def section_recovery(table, model, tok, items, args):
    from recovery_decodes import compare, same

    ns = argparse.Namespace(
        beams=5,
        samples=10,
        top_p=0.9,
        seed=1234,
        reps=args.reps,
        budget=args.budget,
        batch_size=args.batch_size,
    )
    res = compare(model, tok, items.to_dicts(), ns)
    n, times = len(items), res["times"]
    table.add(
        "recovery",
        "items/s, 5 beams + 10 samples (median)",
        n / statistics.median(times["engine"]),
        n / statistics.median(times["hf"]),
        "items/s",
        f"budget {args.budget}",
    )
    beams, samples = res["beams"], res["samples"]
    table.add("recovery", "identical beam hypotheses", same(beams), len(beams["hf"]), "hypotheses")
    table.add(
        "recovery",
        "identical samples (first line)",
        same(samples),
        len(samples["hf"]),
        "samples",
        "same seed",
    )


def section_vllm(table, items, args):
    """Both engines in the vLLM venv on the same items (engines.parity.run_both)."""
    from recovery_decodes import bundled_model_dir

    from benchmark_illusion.evaluation.engines import missing_vllm_message, vllm_python

    py = vllm_python()
    if py is None:
        sys.exit(missing_vllm_message("bench section vllm"))
    with tempfile.TemporaryDirectory() as tmp:
        items.write_parquet(Path(tmp) / "items.parquet")
        out = Path(tmp) / "out"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), VLLM_CPU_OMP_THREADS_BIND="nobind")
        cmd = [py, "-m", "benchmark_illusion.evaluation.engines.parity", str(bundled_model_dir())]
        cmd += [str(Path(tmp) / "items.parquet"), str(out), "--reps", str(args.reps)]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        timing = json.loads((out / "timing.json").read_text())
        import polars as pl

        from benchmark_illusion.evaluation.engines.parity import parity

        measures = parity(
            pl.read_parquet(out / "native.parquet"), pl.read_parquet(out / "vllm1.parquet")
        )
        same = (
            pl.read_parquet(out / "vllm1.parquet")
            .drop("seconds")
            .equals(pl.read_parquet(out / "vllm2.parquet").drop("seconds"), null_equal=True)
        )
    n, secs = timing["items"], timing["seconds"]
    for phase in ("mc", "greedy", "recovery"):
        table.add(
            "vllm",
            f"{phase} items/s (native, vLLM)",
            n / secs["native"][phase],
            n / secs["vllm"][phase],
            "items/s",
            f"median of {args.reps}" + (", 5 beams + 10 samples" if phase == "recovery" else ""),
        )
    table.add(
        "vllm", "load seconds (native, vLLM)", timing["load"]["native"], timing["load"]["vllm"], "s"
    )
    for m in measures:
        value = m["value"]
        note = f"{value:.2g}" if isinstance(value, float) else (value or "")
        table.add("vllm", m["measure"].split(" (")[0], m["agree"], m["of"], "items", note)
    table.add("vllm", "vLLM rows identical when run twice", int(same), 1, "")


def matmul_gflops(seconds: float = 3.0) -> float:
    """This machine's fp32 matmul rate: the best of repeated 1024 x 1024 products."""
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(10):
            torch.mm(a, b)
        best = max(best, 10 * 2 * 1024**3 / (time.perf_counter() - t0) / 1e9)
    return best


def forward_flops(model, n_context: int, n_logits: int, attention: float) -> float:
    """Forward FLOPs: 2 x (decoder linear weights) per token run through the model, 2 x the
    vocabulary projection per position that gets logits, plus the attention FLOPs given."""
    import torch

    head = model.get_output_embeddings().weight.numel()
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return 2.0 * (linear - head) * n_context + 2.0 * head * n_logits + attention


def section_flops(table, model, tok, items, args):
    peak = matmul_gflops()
    log, sec = our_eval(model, tok, items, ("open", "mc"), args.batch_size)
    opened = log.filter(log["format"] == "open")
    lens = opened["n_prompt_tokens"].to_list()
    cfg = model.config
    _, sep = prompts(tok, items)
    # tokens run after the prompt: every option and gold (teacher-forced) and the greedy answer
    scored = sum(
        len(tok(sep + text, add_special_tokens=False)["input_ids"])
        for r in items.to_dicts()
        for text in [*r["options"], *r["answers"]]
    ) + int(opened["n_output_tokens"].sum())
    # causal attention of an n-token prompt: QK^T and AV over n^2/2 pairs, per layer
    attention = sum(2.0 * n * n * cfg.hidden_size * cfg.num_hidden_layers for n in lens)
    flops = forward_flops(model, sum(lens) + scored, len(lens) + scored, attention)
    achieved = flops / sec / 1e9
    table.add("flops", "fp32 matmul peak (1024^3, best)", peak, None, "GFLOP/s")
    table.add(
        "flops",
        "evaluation loop (open + mc)",
        achieved,
        peak,
        "GFLOP/s",
        f"{sum(lens)} prompt + {scored} scored tokens in {sec:.1f} s; ratio = share",
    )


def section_memory(table, model, tok, items, args):
    """Peak RSS of evaluating every item in every format, in a fresh process, against a fresh
    process that holds the model and runs one batch of prompts."""
    code = f"""
import sys
sys.path.insert(0, {str(BENCH)!r})
import polars as pl, bench
model, tok = bench.bundled()
items = pl.read_parquet(sys.argv[1])
which = sys.argv[2]
if which == 'batch':
    from benchmark_illusion.evaluation import engine
    from benchmark_illusion.evaluation.decoding import Tokens
    from benchmark_illusion.evaluation.settings import EvalSettings
    texts, _ = bench.prompts(tok, items)
    toks = Tokens(tok, EvalSettings().prompt)
    engine.prefill(model, [toks.encode(t) for t in texts[:{args.batch_size}]], toks.pad_id)
else:
    bench.our_eval(model, tok, items, ('open', 'mc', 'candidates'), {args.batch_size})
# VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's peak at fork on Linux
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
print(int(hwm) / 2**20)
"""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "items.parquet"
        items.write_parquet(path)
        rss = {}
        for which in ("batch", "eval"):
            out = subprocess.run(
                [sys.executable, "-c", code, str(path), which],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rss[which] = float(out.strip().splitlines()[-1])
    table.add(
        "memory",
        f"peak RSS, {len(items)} items, 3 formats",
        rss["eval"],
        rss["batch"],
        "GiB",
        "anchor = model + one batch's prefill",
    )


def _passages(path_template: str) -> list[str]:
    data = json.loads(Path(path_template.format(lang="en")).read_text())["data"]
    return sorted({p["context"] for d in data for p in d["paragraphs"]})


def _perplexity(model, windows) -> float:
    import math

    import torch

    with torch.inference_mode():
        loss = sum(
            float(model(input_ids=windows[i : i + 4], labels=windows[i : i + 4]).loss)
            * len(windows[i : i + 4])
            for i in range(0, len(windows), 4)
        ) / len(windows)
    return math.exp(loss)


def _first_diff(a: dict, b: dict) -> int | None:
    """Index of the first decoder block whose masks differ ('{block}.{linear}' keys)."""
    blocks = sorted({int(k.split(".")[0]) for k in a if not bool((a[k] == b[k]).all())})
    return blocks[0] if blocks else None


def _calibration_split(model_dir, args):
    """(dense model, tokenizer, calibration windows, held-out windows): calibration from the
    first half of the items' passages, held-out perplexity windows from the other half."""
    from benchmark_illusion.compression.calibration import make_windows
    from benchmark_illusion.models.checkpoints import load_checkpoint

    model, tok = load_checkpoint(model_dir)
    docs = _passages(items_source()[0])
    half = len(docs) // 2
    calib = make_windows(docs[:half], tok, args.calib_windows, args.calib_len, seed=1)
    held = make_windows(docs[half:], tok, 16, args.calib_len, seed=2)
    return model, tok, calib, held


def section_prune(table, model_dir, args):
    from safetensors.torch import save_file

    from benchmark_illusion.compression.blockwise import decoder_layers, prunable_linears
    from benchmark_illusion.compression.pruning.layerwise import PruneSettings, prune_model
    from benchmark_illusion.models.checkpoints import load_checkpoint

    py = anchor_python("llmc")
    model, tok, calib, held = _calibration_split(model_dir, args)
    table.add("prune", "dense held-out perplexity", _perplexity(model, held), None, "")

    def masks(m):
        return {
            f"{i}.{name}": lin.weight == 0
            for i, layer in enumerate(decoder_layers(m))
            for name, lin in prunable_linears(layer).items()
        }

    with tempfile.TemporaryDirectory() as tmp:
        wpath = Path(tmp) / "windows.safetensors"
        save_file({"input_ids": calib.contiguous()}, str(wpath))
        for method in ("wanda", "sparsegpt"):
            ours, _ = load_checkpoint(model_dir)
            t0 = time.perf_counter()
            prune_model(ours, calib, PruneSettings(method, 0.5), progress=False)
            our_s = time.perf_counter() - t0
            out_dir, out_json = Path(tmp) / method, Path(tmp) / f"{method}.json"
            env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
            subprocess.run(
                [str(py), str(BENCH / "anchors" / "llmc_worker.py"), str(model_dir), str(wpath)]
                + [method, "0.5", str(out_dir), str(out_json)],
                check=True,
                env=env,
                capture_output=True,
            )
            res = json.loads(out_json.read_text())
            theirs, _ = load_checkpoint(out_dir)
            table.add(
                "prune",
                f"{method} seconds",
                our_s,
                res["seconds"],
                "s",
                f"{args.calib_windows} x {args.calib_len} calibration tokens",
            )
            a, b = masks(ours), masks(theirs)
            same = sum(int((a[k] == b[k]).sum()) for k in a)
            total = sum(a[k].numel() for k in a)
            table.add(
                "prune",
                f"{method} mask agreement",
                same / total,
                1.0,
                "share",
                f"sparsity ours {sum(int(a[k].sum()) for k in a) / total:.4f}, "
                f"theirs {sum(int(b[k].sum()) for k in b) / total:.4f}",
            )
            if method == "wanda":
                # The control: our own masks at another calibration batch size. Floats summed
                # in another order flip near-ties from about the 7th block on, and the flips
                # grow through the pruned activations each block passes on; an agreement with
                # llm-compressor at this level is float noise, not a different algorithm.
                again, _ = load_checkpoint(model_dir)
                prune_model(again, calib, PruneSettings(method, 0.5, batch_size=1), progress=False)
                c = masks(again)
                table.add(
                    "prune",
                    "wanda mask agreement, ours at calibration batch 1 vs 8 (noise floor)",
                    sum(int((a[k] == c[k]).sum()) for k in a) / total,
                    1.0,
                    "share",
                    f"first block that differs: {_first_diff(a, c)} here, "
                    f"{_first_diff(a, b)} against llm-compressor (of {len(decoder_layers(again))})",
                )
                del again
            table.add(
                "prune",
                f"{method} held-out perplexity",
                _perplexity(ours, held),
                _perplexity(theirs, held),
                "",
                "anchor: llm-compressor's checkpoint",
            )
            del ours, theirs


def section_quant(table, model_dir, args):
    import torch
    from safetensors.torch import load_file, save_file

    from benchmark_illusion.compression.quantization import (
        Grid,
        QuantizeSettings,
        distinct_per_group,
        quantize_model,
    )
    from benchmark_illusion.models.checkpoints import load_checkpoint

    py = anchor_python("llmc")
    model, tok, calib, held = _calibration_split(model_dir, args)
    table.add("quant", "dense held-out perplexity", _perplexity(model, held), None, "")
    group = 64
    with tempfile.TemporaryDirectory() as tmp:
        wpath = Path(tmp) / "windows.safetensors"
        save_file({"input_ids": calib.contiguous()}, str(wpath))
        for bits in (4, 3):
            grid = Grid(bits, group)
            tag = f"{bits}-bit g{group}"
            rtn_model, _ = load_checkpoint(model_dir)
            t0 = time.perf_counter()
            quantize_model(rtn_model, None, QuantizeSettings("rtn", grid), progress=False)
            table.add("quant", f"rtn {tag} seconds", time.perf_counter() - t0, None, "s")
            table.add("quant", f"rtn {tag} held-out perplexity", _perplexity(rtn_model, held))
            del rtn_model
            ours, _ = load_checkpoint(model_dir)
            t0 = time.perf_counter()
            quantize_model(ours, calib, QuantizeSettings("gptq", grid), progress=False)
            our_s = time.perf_counter() - t0
            out_w, out_json = Path(tmp) / f"llmc{bits}.safetensors", Path(tmp) / f"llmc{bits}.json"
            env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
            subprocess.run(
                [str(py), str(BENCH / "anchors" / "llmc_quant_worker.py"), str(model_dir)]
                + [str(wpath), str(bits), str(group), "false", str(out_w), str(out_json)],
                check=True,
                env=env,
                capture_output=True,
            )
            res = json.loads(out_json.read_text())
            theirs, _ = load_checkpoint(model_dir)
            weights = load_file(str(out_w))
            params = dict(theirs.named_parameters())
            with torch.no_grad():
                for name, w in weights.items():
                    params[name].copy_(w)
            table.add(
                "quant",
                f"gptq {tag} seconds",
                our_s,
                res["seconds"],
                "s",
                f"{args.calib_windows} x {args.calib_len} calibration tokens",
            )
            table.add(
                "quant",
                f"gptq {tag} held-out perplexity",
                _perplexity(ours, held),
                _perplexity(theirs, held),
                "",
                "anchor: llm-compressor's weights",
            )
            total = sum(w.numel() for w in weights.values())
            most = max(int(distinct_per_group(w, grid).max()) for w in weights.values())

            def same(m, weights=weights, total=total):
                p = dict(m.named_parameters())
                return sum(int((p[n] == w).sum()) for n, w in weights.items()) / total

            table.add(
                "quant",
                f"gptq {tag} same value as llm-compressor",
                same(ours),
                1.0,
                "share",
                f"{len(weights)} Linears; at most {most} values per group in theirs "
                f"(grid: {2**bits})",
            )
            # llm-compressor fixes every group's grid from the original weights: so does
            # static_groups; the same algorithm should then agree far more often
            static, _ = load_checkpoint(model_dir)
            t0 = time.perf_counter()
            quantize_model(
                static, calib, QuantizeSettings("gptq", grid, static_groups=True), progress=False
            )
            table.add(
                "quant", f"gptq static groups {tag} seconds", time.perf_counter() - t0, None, "s"
            )
            table.add(
                "quant",
                f"gptq static groups {tag} held-out perplexity",
                _perplexity(static, held),
                _perplexity(theirs, held),
                "",
                "anchor: llm-compressor's weights",
            )
            table.add(
                "quant",
                f"gptq static groups {tag} same value as llm-compressor",
                same(static),
                1.0,
                "share",
            )
            del ours, theirs, static


def section_plan(table, args):
    snakemake = str(Path(sys.executable).parent / "snakemake")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [snakemake, "-n", "--cores", "2", "-s", str(ROOT / "Snakefile"), "-d", tmp]
        cmd += ["--configfile", str(ROOT / "config" / "paper.yaml")]
        best, jobs = float("inf"), 0
        for _ in range(args.reps):
            t0 = time.perf_counter()
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            best = min(best, time.perf_counter() - t0)
        for line in out.split("Job stats:", 1)[1].splitlines():
            if line.startswith("total"):
                jobs = int(line.split()[1])
                break
    table.add("plan", "snakemake -n, config/paper.yaml (best)", best, None, "s", f"{jobs} jobs")


def section_aggregate(table, args):
    out = subprocess.run(
        [sys.executable, str(BENCH / "aggregate_scale.py"), "--one", "10m"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    r = json.loads(out.strip().splitlines()[-1])
    slowest = sorted(r["sql_seconds"].items(), key=lambda kv: -kv[1])[:3]
    note = f"{r['log_rows']:,} log rows, {r['draws']:,} bootstrap draws; slowest: " + ", ".join(
        f"{name} {s:.0f} s" for name, s in slowest
    )
    table.add("aggregate", "metric tables over 10M log rows", r["seconds"], None, "s", note)
    table.add("aggregate", "peak RSS", r["peak_rss_gib"], None, "GiB")


def section_run(table, args):
    snakemake = str(Path(sys.executable).parent / "snakemake")
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        # the embedded default, its relative dataset paths made absolute (they resolve against
        # the working directory, here a temporary one)
        cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
        for ds in cfg["datasets"].values():
            if "path" in ds and not Path(ds["path"]).is_absolute():
                ds["path"] = str(ROOT / ds["path"])
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        cmd = [snakemake, "--cores", "2", "-s", str(ROOT / "Snakefile"), "-d", tmp]
        cmd += ["--configfile", str(path), "--profile", str(ROOT / "profiles" / "local")]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        minutes = (time.perf_counter() - t0) / 60
    table.add(
        "run",
        "make run (embedded default), --cores 2",
        minutes,
        PREVIOUS_RUN_MINUTES,
        "min",
        "anchor = PREVIOUS_RUN_MINUTES, a fixed reference time",
    )


def bundled():
    from recovery_decodes import bundled_model

    return bundled_model()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(SECTIONS))
    p.add_argument("--n", type=int, default=24, help="items")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lmeval-batch", type=int, default=16)
    p.add_argument("--budget", type=int, default=24)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--calib-windows", type=int, default=16, help="prune: calibration windows")
    p.add_argument("--calib-len", type=int, default=128, help="prune: tokens per window")
    args = p.parse_args()
    only = [s for s in args.only.split(",") if s]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")

    import torch
    from realism_xquad import items_for

    needs_model = set(only) & {"mc", "greedy", "recovery", "prune", "quant", "flops", "memory"}
    model, tok = bundled() if needs_model else (None, None)
    model_dir = BENCH / ".models" / "smollm2-135m"
    src, label = items_source()
    items = items_for(src, "en", args.n, args.seed)
    header = (
        f"{len(items)} items ({label}), bundled model (fp32, CPU), "
        f"{torch.get_num_threads()} threads, {args.reps} repetitions interleaved"
    )
    print(header)
    print(f"  {'section':9} {'measure':38} {'ours':>10} {'anchor':>10} {'ratio':>7}")
    table = Table()
    for name in only:
        if name == "mc":
            section_mc(table, model, tok, model_dir, items, args)
        elif name == "greedy":
            section_greedy(table, model, tok, model_dir, items, args)
        elif name == "recovery":
            section_recovery(table, model, tok, items, args)
        elif name == "vllm":
            section_vllm(table, items, args)
        elif name == "prune":
            section_prune(table, model_dir, args)
        elif name == "quant":
            section_quant(table, model_dir, args)
        elif name == "flops":
            section_flops(table, model, tok, items, args)
        elif name == "memory":
            section_memory(table, model, tok, items, args)
        elif name == "plan":
            section_plan(table, args)
        elif name == "aggregate":
            section_aggregate(table, args)
        elif name == "run":
            section_run(table, args)
    print()
    print(table.write(header))


if __name__ == "__main__":
    main()
