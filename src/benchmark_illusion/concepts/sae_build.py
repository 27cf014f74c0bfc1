"""Rule `sae`: the dense model's SAE, trained on the corpus or adapted from a published one.

Steps (build_sae): resolve the hook (the configured layer, or the published SAE's hook), build
the corpus (concepts.build_corpus) and read its activations up to the norm threshold (residual.py),
train a TopK SAE on the training split (sae_train.py) or adapt the published one (sae.py), measure
the fit on the held-out split and check it against concepts.sae.fve_floor, write the folder.

Output folder: sae/ (SAELens format), fit.json (fit statistics), corpus.parquet (the corpus).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import polars as pl
import torch

from benchmark_illusion.concepts.activations import ConceptSettings
from benchmark_illusion.concepts.residual import (
    Activations,
    ResidualReader,
    median_norm_threshold,
    norm_threshold,
    read_activations,
)
from benchmark_illusion.concepts.sae import (
    SAEError,
    SparseAutoencoder,
    add_metadata,
    hook_name,
    load_pretrained,
    parse_hook,
)
from benchmark_illusion.concepts.sae_train import ActivationStream, train_topk
from benchmark_illusion.io import atomic_path, write_json, write_parquet

log = logging.getLogger("benchmark_illusion")

N_REF = 64  # the norm threshold's reference sample: the first 64 sequences of the (shuffled) corpus


def default_layer(n_layers: int) -> int:
    return n_layers // 2


def resolve_hook(model, s: ConceptSettings, pretrained: dict | None) -> tuple[str, object | None]:
    """The hook the SAE reads, and the SAELens SAE when the model names a published one
    (its hook and width must fit the model); otherwise the hook of concepts.layer (null: the
    middle decoder layer)."""
    n_layers = model.config.num_hidden_layers
    if pretrained:
        src = load_pretrained(pretrained)
        hook = src.cfg.metadata.hook_name
        parse_hook(hook)
        if src.cfg.d_in != model.config.hidden_size:
            raise SAEError(
                f"pretrained SAE {pretrained}: d_in {src.cfg.d_in} != the model's hidden size "
                f"{model.config.hidden_size}"
            )
        return hook, src
    layer = default_layer(n_layers) if s.layer is None else int(s.layer)
    if not 0 <= layer < n_layers:
        raise SAEError(
            f"concepts.layer = {layer}: the model has {n_layers} decoder layers (0..{n_layers - 1})"
        )
    return hook_name(layer), None


def corpus_reader(
    reader: ResidualReader, seqs: list[list[int]], s: ConceptSettings, pad: int, device: str
) -> tuple[Callable[[list[int]], Activations], float]:
    """read(sequence indices) -> their activations up to the norm threshold, and the threshold
    (concepts.sae.norm_factor x the median norm of the first N_REF sequences).

    A corpus within concepts.sae.buffer_tokens is read once, and read() selects from it; a
    larger one is read again, from the model, on every call.
    """
    n_ref = min(len(seqs), N_REF)
    if sum(map(len, seqs)) <= s.sae.buffer_tokens:
        everything = read_activations(
            reader, seqs, batch_size=s.batch_size, pad_id=pad, device=device, progress="activations"
        )
        threshold = norm_threshold(everything, s.norm_factor, n_ref)

        def read(idx):
            return everything.select(idx, threshold)
    else:
        threshold = median_norm_threshold(
            reader, seqs[:n_ref], s.norm_factor, batch_size=s.batch_size, pad_id=pad, device=device
        )

        def read(idx):
            return read_activations(
                reader,
                [seqs[i] for i in idx],
                batch_size=s.batch_size,
                pad_id=pad,
                norm_threshold=threshold,
                device=device,
                progress="activations",
            )

    return read, threshold


def train_sae(
    read: Callable[[list[int]], Activations],
    train_idx: list[int],
    seqs: list[list[int]],
    d_in: int,
    s: ConceptSettings,
    meta: dict,
) -> tuple[SparseAutoencoder, list[dict], torch.Tensor | None]:
    """A TopK SAE trained on the training sequences: (SAE, loss log, the training activations
    when they were held in memory, for the PCA baseline; None when streamed)."""
    stream = ActivationStream(
        read, train_idx, [len(seqs[i]) for i in train_idx], s.sae.buffer_tokens, s.sae.seed
    )
    sae, history = train_topk(stream, d_in, s.sae, metadata=meta)
    return sae, history, stream.cached


def corpus_stats(corpus: pl.DataFrame, seqs: list[list[int]]) -> dict:
    """Sequences, tokens and sequences per source of the corpus (fit.json)."""
    return {
        "corpus_sequences": len(seqs),
        "corpus_tokens": sum(map(len, seqs)),
        "corpus_sources": {
            src_: int((corpus["source"] == src_).sum())
            for src_ in corpus["source"].unique().to_list()
        },
    }


def check_fve_floor(stats: dict, floor: float, model_name: str, hook: str) -> None:
    if not stats["fve"] >= floor:
        raise SAEError(
            f"SAE for {model_name} at {hook}: held-out FVE {stats['fve']:.3f} is below "
            f"concepts.sae.fve_floor = {floor} "
            f"(L0 {stats['l0']:.1f}, dead {stats['dead_fraction']:.3f}); "
            "train longer (concepts.sae.epochs), on more text, or with a larger k / width"
        )


def write_sae_folder(
    out_dir: str | Path, sae, src, meta: dict, corpus: pl.DataFrame, stats: dict
) -> None:
    """Write sae/, corpus.parquet and fit.json atomically (a failure leaves no folder)."""
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        sae_dir = tmp / "sae"
        sae_dir.mkdir()
        if src is not None:
            src.save_model(sae_dir)  # SAELens writes its own format; add where positions were cut
            add_metadata(sae_dir, meta)
        else:
            sae.write_into(sae_dir)
        write_parquet(corpus, tmp / "corpus.parquet")
        write_json(stats, tmp / "fit.json")
