"""Concepts of the dense model: the SAE's corpus, per-item concept activations, latent labels.

Rules (workflow/rules/concepts.smk) and what they write under results/concepts/{model}/:
  sae                   sae/ (SAELens folder: cfg.json, sae_weights.safetensors) + fit.json
                        (FVE, L0, dead fraction, PCA baseline) + corpus.parquet (the token
                        sequences of build_corpus, with their train / heldout split); the rule's
                        steps are in sae_build.py
  concept_labels        labels.parquet: per latent its density, top tokens, max-activating
                        examples with context, a short label (and an LLM label when
                        configured); the rule's steps are in labels.py
  concept_activations   activations/{dataset}/{lang}.parquet: (item_id, concept, activation),
                        a_c(x) = sum over the item's prompt tokens of the latent's activation /
                        the token count, rows with a_c(x) > 0 only; and .tokens.parquet: the
                        token count per item
The SAE itself: sae.py (the model, its file format, SAELens), residual.py (reading the residual
stream), sae_train.py (training and fit). Definitions: docs/concepts.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import torch
from safetensors.torch import load_file
from tqdm import tqdm

from benchmark_illusion.compression.calibration import text_file_documents
from benchmark_illusion.concepts.residual import ResidualReader, read_activations
from benchmark_illusion.concepts.sae import SAEError, SAELensAdapter, SparseAutoencoder, open_sae
from benchmark_illusion.concepts.sae_train import TrainSettings
from benchmark_illusion.evaluation.engine import pad_id
from benchmark_illusion.evaluation.prompts import (
    PromptSettings,
    adds_special_tokens,
    build_prompt,
    item_body,
)
from benchmark_illusion.models.checkpoints import load_checkpoint

log = logging.getLogger("benchmark_illusion")

CORPUS_SOURCES = ("items", "calibration")


@dataclass(frozen=True)
class ConceptSettings:
    """Config `concepts`; the defaults are the schema's (workflow/schemas/config.schema.yaml).

    Each rule builds its settings from its own params (benchmark_illusion.config.params), which hold
    only the keys that decide its outputs: for_sae, for_labels, for_activations. A field that a
    rule's params do not carry keeps its default, and that rule does not read it.
    """

    layer: int | None = None
    sae: TrainSettings = field(default_factory=TrainSettings)
    corpus: tuple[str, ...] = CORPUS_SOURCES
    text_files: tuple[str, ...] = ()
    max_tokens: int = 1_000_000
    heldout_fraction: float = 0.1
    fve_floor: float = 0.6
    norm_factor: float = 10.0
    tokens: str = "content"
    batch_size: int = 8
    top_examples: int = 10
    context_tokens: int = 8
    labeler: dict | None = None

    @classmethod
    def for_sae(cls, params: dict) -> ConceptSettings:
        """Rule `sae`: seed, concepts.layer, concepts.sae (without languages),
        concepts.batch_size."""
        c = params["concepts"]
        t = c["sae"]
        return cls(
            layer=c["layer"],
            sae=TrainSettings.from_config(t, params["seed"]),
            corpus=tuple(t["corpus"]),
            text_files=tuple(t["text_files"]),
            max_tokens=int(t["max_tokens"]),
            heldout_fraction=float(t["heldout_fraction"]),
            fve_floor=float(t["fve_floor"]),
            norm_factor=float(t["norm_factor"]),
            batch_size=int(c["batch_size"]),
        )

    @classmethod
    def for_labels(cls, params: dict) -> ConceptSettings:
        """Rule `concept_labels`: concepts.batch_size and concepts.labels."""
        c = params["concepts"]
        lab = c["labels"]
        return cls(
            batch_size=int(c["batch_size"]),
            top_examples=int(lab["top_examples"]),
            context_tokens=int(lab["context_tokens"]),
            labeler=lab["labeler"],
        )

    @classmethod
    def for_activations(cls, params: dict) -> ConceptSettings:
        """Rule `concept_activations`: concepts.tokens and concepts.batch_size."""
        c = params["concepts"]
        return cls(tokens=c["tokens"], batch_size=int(c["batch_size"]))


# --------------------------------------------------------------------------------------------
# Corpus


def item_prompt(
    tokenizer, prompt: PromptSettings, item: dict, tokens: str = "content"
) -> tuple[list[int], list[bool]]:
    """Token ids of the item's `open` prompt, and which of them count as the item's tokens.

    tokens='content': the tokens that overlap the passage and the question (the template, the
    instruction and the answer prefix are the same for every item and are left out);
    tokens='prompt': every token of the prompt.
    """
    text = build_prompt(tokenizer, prompt, item, "open")
    enc = tokenizer(
        text, add_special_tokens=adds_special_tokens(tokenizer, prompt), return_offsets_mapping=True
    )
    ids = enc["input_ids"]
    if tokens == "prompt":
        return ids, [True] * len(ids)
    if tokens != "content":
        raise ValueError(f"concepts.tokens must be 'content' or 'prompt', got {tokens!r}")
    body = item_body(item)
    start = text.find(body)
    if start < 0:
        raise ValueError(
            f"item {item.get('item_id')!r}: its passage and question (prompts.item_body) are not "
            "in its rendered `open` prompt, "
            "so its content tokens cannot be told from the template's"
        )
    end = start + len(body)
    keep = [e > start and s < end for s, e in enc["offset_mapping"]]
    return ids, keep


def build_corpus(
    tokenizer,
    prompt: PromptSettings,
    settings: ConceptSettings,
    *,
    item_files=(),
    calibration: str | Path | None = None,
) -> pl.DataFrame:
    """The SAE corpus: one row per token sequence (seq, source, doc, input_ids, split).

    Sources: `items` (the open prompt of every candidate item), `calibration` (the pruning
    calibration windows), and `text_files`. Sequences are shuffled (seeded) and cut at
    settings.max_tokens; a seeded heldout_fraction of them is held out for the fit statistics.
    """
    rows = []
    if "items" in settings.corpus:
        for f in item_files:
            df = pl.read_parquet(f)
            for item in df.to_dicts():
                ids, _ = item_prompt(tokenizer, prompt, item, "prompt")
                rows.append(
                    ("items", f"{item.get('dataset', '')}/{item['lang']}/{item['item_id']}", ids)
                )
    if "calibration" in settings.corpus and calibration is not None:
        for i, w in enumerate(load_file(str(calibration))["input_ids"].tolist()):
            rows.append(("calibration", f"window {i}", w))
    for d_i, doc in enumerate(
        text_file_documents(list(settings.text_files)) if settings.text_files else []
    ):
        ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
        for j in range(0, len(ids), 512):
            rows.append(("text", f"doc {d_i} part {j // 512}", ids[j : j + 512]))
    if not rows:
        raise SAEError("the SAE corpus is empty: concepts.sae.corpus names no source with text")
    g = torch.Generator().manual_seed(settings.sae.seed)
    order = torch.randperm(len(rows), generator=g).tolist()
    kept, total = [], 0
    for i in order:
        if total >= settings.max_tokens:
            break
        kept.append(rows[i])
        total += len(rows[i][2])
    n_held = (
        max(1, round(settings.heldout_fraction * len(kept))) if settings.heldout_fraction > 0 else 0
    )
    return pl.DataFrame(
        {
            "seq": list(range(len(kept))),
            "source": [r[0] for r in kept],
            "doc": [r[1] for r in kept],
            "input_ids": [r[2] for r in kept],
            "split": ["heldout" if i < n_held else "train" for i in range(len(kept))],
        },
        schema={
            "seq": pl.Int32,
            "source": pl.Utf8,
            "doc": pl.Utf8,
            "input_ids": pl.List(pl.Int32),
            "split": pl.Utf8,
        },
    )


def open_with_reader(
    sae_folder: str | Path, model_dir: str | Path, device: str = "cpu"
) -> tuple[SparseAutoencoder | SAELensAdapter, ResidualReader, object]:
    """(SAE, a reader of the dense model at the SAE's hook, tokenizer) for the concept rules."""
    sae = open_sae(sae_folder)
    net, tok = load_checkpoint(model_dir, device=device)
    return sae, ResidualReader(net, sae.hook_name), tok


# --------------------------------------------------------------------------------------------
# Rule `concept_activations`


ACTIVATION_SCHEMA = {
    "model": pl.Utf8,
    "dataset": pl.Utf8,
    "lang": pl.Utf8,
    "item_id": pl.Utf8,
    "concept": pl.Int32,
    "activation": pl.Float32,
}
TOKENS_SCHEMA = {
    "model": pl.Utf8,
    "dataset": pl.Utf8,
    "lang": pl.Utf8,
    "item_id": pl.Utf8,
    "n_tokens": pl.Int32,
    "n_excluded": pl.Int32,
}


@torch.no_grad()
def item_concepts(
    sae,
    reader: ResidualReader,
    tokenizer,
    prompt: PromptSettings,
    items: list[dict],
    settings: ConceptSettings,
    device: str = "cpu",
) -> tuple[torch.Tensor, list[int], list[int]]:
    """[n_items, d_sae] a_c(x) (mean activation over each item's kept tokens), kept and excluded
    counts."""
    out = torch.zeros(len(items), sae.d_sae)
    n_tok, n_exc = [0] * len(items), [0] * len(items)
    chunk = 4 * settings.batch_size
    for start in tqdm(range(0, len(items), chunk), desc="concept activations", mininterval=5):
        part = items[start : start + chunk]
        enc = [item_prompt(tokenizer, prompt, it, settings.tokens) for it in part]
        seqs, keeps = [e[0] for e in enc], [e[1] for e in enc]
        acts = read_activations(
            reader,
            seqs,
            batch_size=settings.batch_size,
            pad_id=pad_id(tokenizer),
            norm_threshold=sae.norm_threshold,
            device=device,
            keep=keeps,
        )
        counts = torch.bincount(acts.seq, minlength=len(part))
        for i in range(len(part)):
            n_tok[start + i] = int(counts[i])
            n_exc[start + i] = sum(keeps[i]) - int(counts[i])
        for s0 in range(0, len(acts.acts), 2048):
            a = sae.encode(acts.acts[s0 : s0 + 2048].to(device)).float().cpu()
            out[start : start + len(part)].index_add_(0, acts.seq[s0 : s0 + 2048], a)
        for i, it in enumerate(part):
            if counts[i] == 0:
                raise SAEError(
                    f"item {it['item_id']!r}: none of its prompt tokens is usable "
                    "(all excluded for their norm, or no passage/question tokens)"
                )
        out[start : start + len(part)] /= counts.clamp_min(1).unsqueeze(1).float()
    return out, n_tok, n_exc
