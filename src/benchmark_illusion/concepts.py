"""Concepts of the dense model: its SAE, the corpus, latent labels, and per-item activations.

Rules (workflow/rules/concepts.smk) and what they write under results/concepts/{model}/:
  sae                   sae/ (SAELens folder: cfg.json, sae_weights.safetensors) + fit.json
                        (FVE, L0, dead fraction, PCA baseline) + corpus.parquet (the token
                        sequences, with their train / heldout split)
  concept_labels        labels.parquet: per latent its density, top tokens, max-activating
                        examples with context, a short label (and an LLM label when configured)
  concept_activations   activations/{dataset}/{lang}.parquet: (item_id, concept, activation),
                        a_c(x) = sum over the item's prompt tokens of the latent's activation /
                        the token count, rows with a_c(x) > 0 only; and .tokens.parquet: the
                        token count per item
Definitions: docs/concepts.md.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import torch

from . import sae as S
from .io import atomic_path, write_json, write_parquet
from .prompts import PromptSettings, adds_special_tokens, build_prompt

log = logging.getLogger("benchmark_illusion")

CORPUS_SOURCES = ("items", "calibration")


@dataclass(frozen=True)
class ConceptSettings:
    """Config `concepts` (defaults: config/README.md)."""

    layer: int | None = None
    sae: S.TrainSettings = field(default_factory=S.TrainSettings)
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
    def from_config(cls, config: dict) -> "ConceptSettings":
        c = config.get("concepts") or {}
        t = dict(c.get("sae") or {})
        lab = c.get("labels") or {}
        train_keys = set(S.TrainSettings.__dataclass_fields__)
        return cls(
            layer=c.get("layer"),
            sae=S.TrainSettings(**{k: v for k, v in t.items() if k in train_keys}, seed=int(config.get("seed", 0))),
            corpus=tuple(t.get("corpus", CORPUS_SOURCES)),
            text_files=tuple(t.get("text_files", ())),
            max_tokens=int(t.get("max_tokens", cls.max_tokens)),
            heldout_fraction=float(t.get("heldout_fraction", cls.heldout_fraction)),
            fve_floor=float(t.get("fve_floor", cls.fve_floor)),
            norm_factor=float(t.get("norm_factor", cls.norm_factor)),
            tokens=c.get("tokens", cls.tokens),
            batch_size=int(c.get("batch_size", cls.batch_size)),
            top_examples=int(lab.get("top_examples", cls.top_examples)),
            context_tokens=int(lab.get("context_tokens", cls.context_tokens)),
            labeler=lab.get("labeler"),
        )


# --------------------------------------------------------------------------------------------
# Corpus


def item_prompt(tokenizer, prompt: PromptSettings, item: dict, tokens: str = "content") -> tuple[list[int], list[bool]]:
    """Token ids of the item's `open` prompt, and which of them count as the item's tokens.

    tokens='content': the tokens that overlap the passage and the question (the template, the
    instruction and the answer prefix are the same for every item and are left out);
    tokens='prompt': every token of the prompt.
    """
    text = build_prompt(tokenizer, prompt, item, "open")
    enc = tokenizer(text, add_special_tokens=adds_special_tokens(tokenizer, prompt), return_offsets_mapping=True)
    ids = enc["input_ids"]
    if tokens == "prompt":
        return ids, [True] * len(ids)
    if tokens != "content":
        raise ValueError(f"concepts.tokens must be 'content' or 'prompt', got {tokens!r}")
    body = f"Passage: {item['context']}\n\nQuestion: {item['question']}"
    start = text.find(body)
    if start < 0:
        raise ValueError(f"item {item.get('item_id')!r}: passage and question not found in its prompt")
    end = start + len(body)
    keep = [e > start and s < end for s, e in enc["offset_mapping"]]
    return ids, keep


def build_corpus(tokenizer, prompt: PromptSettings, settings: ConceptSettings, *, item_files=(),
                 calibration: str | Path | None = None) -> pl.DataFrame:
    """The SAE corpus: one row per token sequence (seq, source, doc, input_ids, split).

    Sources: `items` (the open prompt of every candidate item), `calibration` (the pruning
    calibration windows), and `text_files`. Sequences are shuffled (seeded) and cut at
    settings.max_tokens; a seeded heldout_fraction of them is held out for the fit statistics.
    """
    from safetensors.torch import load_file

    from .calibration import text_file_documents

    rows = []
    if "items" in settings.corpus:
        for f in item_files:
            df = pl.read_parquet(f)
            for item in df.to_dicts():
                ids, _ = item_prompt(tokenizer, prompt, item, "prompt")
                rows.append(("items", f"{item.get('dataset', '')}/{item['lang']}/{item['item_id']}", ids))
    if "calibration" in settings.corpus and calibration is not None:
        for i, w in enumerate(load_file(str(calibration))["input_ids"].tolist()):
            rows.append(("calibration", f"window {i}", w))
    for d_i, doc in enumerate(text_file_documents(list(settings.text_files)) if settings.text_files else []):
        ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
        for j in range(0, len(ids), 512):
            rows.append(("text", f"doc {d_i} part {j // 512}", ids[j:j + 512]))
    if not rows:
        raise S.SAEError("the SAE corpus is empty: concepts.sae.corpus names no source with text")
    g = torch.Generator().manual_seed(settings.sae.seed)
    order = torch.randperm(len(rows), generator=g).tolist()
    kept, total = [], 0
    for i in order:
        if total >= settings.max_tokens:
            break
        kept.append(rows[i])
        total += len(rows[i][2])
    n_held = max(1, round(settings.heldout_fraction * len(kept))) if settings.heldout_fraction > 0 else 0
    return pl.DataFrame(
        {"seq": list(range(len(kept))), "source": [r[0] for r in kept], "doc": [r[1] for r in kept],
         "input_ids": [r[2] for r in kept],
         "split": ["heldout" if i < n_held else "train" for i in range(len(kept))]},
        schema={"seq": pl.Int32, "source": pl.Utf8, "doc": pl.Utf8, "input_ids": pl.List(pl.Int32), "split": pl.Utf8},
    )


# --------------------------------------------------------------------------------------------
# Rule `sae`


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)


def default_layer(n_layers: int) -> int:
    return n_layers // 2


def load_pretrained(spec: dict):
    """A published SAE through SAELens: {release, sae_id} (hub) or {path} (a local SAELens folder)."""
    try:
        from sae_lens import SAE
    except ImportError as e:
        raise S.SAEError(
            "a pretrained SAE (models.<name>.sae) is loaded with SAELens, which is an optional extra: "
            "pip install 'benchmark-illusion[sae]'"
        ) from e
    if spec.get("path"):
        return SAE.load_from_disk(spec["path"], device="cpu")
    return SAE.from_pretrained(spec["release"], spec["sae_id"], device="cpu")


def build_sae(model_dir: str | Path, out_dir: str | Path, config: dict, *, item_files=(), calibration=None,
              pretrained: dict | None = None, device: str = "cpu") -> dict:
    """Train (or load) the model's SAE and write out_dir atomically; returns the fit statistics.

    Raises SAEError when the held-out FVE is below concepts.sae.fve_floor (nothing is written).
    """
    from .models import load_checkpoint

    t0 = time.perf_counter()
    s = ConceptSettings.from_config(config)
    prompt = PromptSettings(**config["prompt"])
    model, tok = load_checkpoint(model_dir, device=device)
    n_layers = model.config.num_hidden_layers
    src = None
    if pretrained:
        src = load_pretrained(pretrained)
        hook = src.cfg.metadata.hook_name
        S.parse_hook(hook)
        if src.cfg.d_in != model.config.hidden_size:
            raise S.SAEError(f"pretrained SAE {pretrained}: d_in {src.cfg.d_in} != the model's hidden size "
                             f"{model.config.hidden_size}")
    else:
        layer = default_layer(n_layers) if s.layer is None else int(s.layer)
        if not 0 <= layer < n_layers:
            raise S.SAEError(f"concepts.layer = {layer}: the model has {n_layers} decoder layers (0..{n_layers - 1})")
        hook = S.hook_name(layer)
    reader = S.ResidualReader(model, hook)
    corpus = build_corpus(tok, prompt, s, item_files=item_files, calibration=calibration)
    seqs = [list(x) for x in corpus["input_ids"].to_list()]
    pad = _pad_id(tok)
    n_ref = min(len(seqs), 64)  # the threshold's reference: the first 64 sequences
    if sum(map(len, seqs)) <= s.sae.buffer_tokens:
        # The corpus fits in memory: one pass of the model, the threshold and the splits from it.
        everything = S.read_activations(reader, seqs, batch_size=s.batch_size, pad_id=pad, device=device,
                                        progress="activations")
        threshold = S.norm_threshold(everything, s.norm_factor, n_ref)

        def read(idx):
            return everything.select(idx, threshold)
    else:
        threshold = S.median_norm_threshold(reader, seqs[:n_ref], s.norm_factor, batch_size=s.batch_size,
                                            pad_id=pad, device=device)

        def read(idx):
            return S.read_activations(reader, [seqs[i] for i in idx], batch_size=s.batch_size, pad_id=pad,
                                      norm_threshold=threshold, device=device, progress="activations")
    log.info("SAE corpus: %d sequences, %d tokens; hook %s; norm threshold %.1f", len(seqs),
             sum(map(len, seqs)), hook, threshold)

    split = corpus["split"].to_list()
    train_idx = [i for i, sp in enumerate(split) if sp == "train"]
    held_idx = [i for i, sp in enumerate(split) if sp == "heldout"]
    held = read(held_idx)
    meta = {"model_name": Path(model_dir).name, "hook_name": hook, "norm_threshold": threshold,
            "norm_factor": s.norm_factor, "trained_by": "benchmark_illusion"}
    if pretrained:
        sae = _SAELensAdapter(src, meta)
        history, train_acts = [], None
    else:
        stream = S.ActivationStream(read, train_idx, [len(seqs[i]) for i in train_idx], s.sae.buffer_tokens, s.sae.seed)
        sae, history = S.train_topk(stream, model.config.hidden_size, s.sae, metadata=meta)
        train_acts = stream.cached
    stats = S.fit_stats(sae, held.acts)
    stats.update(
        hook_name=hook, d_sae=sae.d_sae, k=getattr(sae, "k", None), norm_threshold=threshold,
        heldout_positions=len(held.acts), heldout_excluded=held.n_excluded,
        corpus_sequences=len(seqs), corpus_tokens=sum(map(len, seqs)),
        corpus_sources={src_: int((corpus["source"] == src_).sum()) for src_ in corpus["source"].unique().to_list()},
        source="pretrained" if pretrained else "train", pretrained=pretrained, fve_floor=s.fve_floor,
        history=history, seconds=round(time.perf_counter() - t0, 1),
    )
    if train_acts is not None and sae.k:
        stats["pca_fve_same_k"] = S.pca_fve(train_acts, held.acts, int(sae.k))
    log.info("SAE fit on %d held-out positions: FVE %.3f, L0 %.1f, dead %.4f", len(held.acts), stats["fve"],
             stats["l0"], stats["dead_fraction"])
    if not stats["fve"] >= s.fve_floor:
        raise S.SAEError(
            f"SAE for {Path(model_dir).name} at {hook}: held-out FVE {stats['fve']:.3f} is below "
            f"concepts.sae.fve_floor = {s.fve_floor} (L0 {stats['l0']:.1f}, dead {stats['dead_fraction']:.3f}); "
            "train longer (concepts.sae.epochs), on more text, or with a larger k / width"
        )
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        sae_dir = tmp / "sae"
        sae_dir.mkdir()
        if pretrained:
            src.save_model(sae_dir)  # SAELens writes its own format; add where positions were cut
            S.add_metadata(sae_dir, meta)
        else:
            sae.write_into(sae_dir)
        write_parquet(corpus, tmp / "corpus.parquet")
        write_json(stats, tmp / "fit.json")
    return stats


class _SAELensAdapter:
    """A SAELens SAE seen through this module's interface (encode, reconstruct, d_sae, k, metadata)."""

    def __init__(self, sae, metadata: dict):
        self.sae, self.metadata = sae, {**dict(sae.cfg.metadata.to_dict()), **metadata}
        self.d_sae = sae.cfg.d_sae
        self.k = getattr(sae.cfg, "k", None)

    @property
    def hook_name(self) -> str:
        return self.metadata["hook_name"]

    @property
    def norm_threshold(self) -> float:
        return float(self.metadata.get("norm_threshold") or math.inf)

    @torch.no_grad()
    def encode(self, x):
        return self.sae.encode(x.to(self.sae.W_enc.dtype)).float()

    @torch.no_grad()
    def reconstruct(self, x):
        return self.sae(x.to(self.sae.W_enc.dtype)).float()


def open_with_reader(sae_folder: str | Path, model_dir: str | Path, device: str = "cpu"):
    """(SAE, a reader of the dense model at the SAE's hook, tokenizer) for the concept rules."""
    from .models import load_checkpoint

    sae = open_sae(sae_folder)
    net, tok = load_checkpoint(model_dir, device=device)
    return sae, S.ResidualReader(net, sae.hook_name), tok


def open_sae(folder: str | Path):
    """The SAE of a `sae` rule output (its sae/ subfolder): natively when this package implements
    its architecture, through SAELens otherwise."""
    folder = Path(folder)
    sae_dir = folder / "sae" if (folder / "sae").is_dir() else folder
    try:
        return S.load_sae(sae_dir)
    except S.UnsupportedSAE:
        import json

        meta = json.loads((sae_dir / S.CFG_FILE).read_text()).get("metadata") or {}
        return _SAELensAdapter(load_pretrained({"path": str(sae_dir)}), meta)


# --------------------------------------------------------------------------------------------
# Rule `concept_activations`


ACTIVATION_SCHEMA = {"model": pl.Utf8, "dataset": pl.Utf8, "lang": pl.Utf8, "item_id": pl.Utf8,
                     "concept": pl.Int32, "activation": pl.Float32}
TOKENS_SCHEMA = {"model": pl.Utf8, "dataset": pl.Utf8, "lang": pl.Utf8, "item_id": pl.Utf8,
                 "n_tokens": pl.Int32, "n_excluded": pl.Int32}


@torch.no_grad()
def item_concepts(sae, reader: S.ResidualReader, tokenizer, prompt: PromptSettings, items: list[dict],
                  settings: ConceptSettings, device: str = "cpu") -> tuple[torch.Tensor, list[int], list[int]]:
    """[n_items, d_sae] a_c(x) (mean activation over each item's kept tokens), kept and excluded counts."""
    from tqdm import tqdm

    out = torch.zeros(len(items), sae.d_sae)
    n_tok, n_exc = [0] * len(items), [0] * len(items)
    chunk = 4 * settings.batch_size
    for start in tqdm(range(0, len(items), chunk), desc="concept activations", mininterval=5):
        part = items[start:start + chunk]
        enc = [item_prompt(tokenizer, prompt, it, settings.tokens) for it in part]
        seqs, keeps = [e[0] for e in enc], [e[1] for e in enc]
        acts = S.read_activations(reader, seqs, batch_size=settings.batch_size, pad_id=_pad_id(tokenizer),
                                  norm_threshold=sae.norm_threshold, device=device, keep=keeps)
        counts = torch.bincount(acts.seq, minlength=len(part))
        for i in range(len(part)):
            n_tok[start + i] = int(counts[i])
            n_exc[start + i] = sum(keeps[i]) - int(counts[i])
        for s0 in range(0, len(acts.acts), 2048):
            a = sae.encode(acts.acts[s0:s0 + 2048].to(device)).float().cpu()
            out[start:start + len(part)].index_add_(0, acts.seq[s0:s0 + 2048], a)
        for i, it in enumerate(part):
            if counts[i] == 0:
                raise S.SAEError(f"item {it['item_id']!r}: none of its prompt tokens is usable "
                                 "(all excluded for their norm, or no passage/question tokens)")
        out[start:start + len(part)] /= counts.clamp_min(1).unsqueeze(1).float()
    return out, n_tok, n_exc


def concept_activations_file(sae_folder: str | Path, model_dir: str | Path, items_file: str | Path,
                             out: str | Path, out_tokens: str | Path, config: dict, *, model: str,
                             dataset: str, lang: str, device: str = "cpu") -> int:
    """Write the sparse per-item concept activations of one benchmark; returns the row count."""
    s = ConceptSettings.from_config(config)
    sae, reader, tok = open_with_reader(sae_folder, model_dir, device)
    items = pl.read_parquet(items_file).to_dicts()
    a, n_tok, n_exc = item_concepts(sae, reader, tok, PromptSettings(**config["prompt"]), items, s, device)
    idx = a.nonzero(as_tuple=False)
    ids = [it["item_id"] for it in items]
    base = {"model": model, "dataset": dataset, "lang": lang}
    rows = pl.DataFrame(
        {**{k: [v] * len(idx) for k, v in base.items()},
         "item_id": [ids[i] for i in idx[:, 0].tolist()], "concept": idx[:, 1].tolist(),
         "activation": a[idx[:, 0], idx[:, 1]].tolist()},
        schema=ACTIVATION_SCHEMA,
    )
    tokens = pl.DataFrame({**{k: [v] * len(items) for k, v in base.items()}, "item_id": ids,
                           "n_tokens": n_tok, "n_excluded": n_exc}, schema=TOKENS_SCHEMA)
    write_parquet(rows, out)
    write_parquet(tokens, out_tokens)
    log.info("%s/%s: %d items, %d (item, concept) rows, %.1f active concepts per item", dataset, lang,
             len(items), len(rows), len(rows) / max(len(items), 1))
    return len(rows)


# --------------------------------------------------------------------------------------------
# Rule `concept_labels`


def _token_text(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id])
    return text.strip() or repr(text)


@torch.no_grad()
def max_activating(sae, reader: S.ResidualReader, tokenizer, seqs: list[list[int]], settings: ConceptSettings,
                   device: str = "cpu") -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per latent: (concept, n_fired, max_activation) and its top examples (concept, activation, seq, pos)."""
    n = settings.top_examples
    fired = torch.zeros(sae.d_sae, dtype=torch.long)
    top = pl.DataFrame(schema={"concept": pl.Int32, "activation": pl.Float32, "seq": pl.Int32, "pos": pl.Int32})
    positions = 0
    chunk = 8 * settings.batch_size
    for start in range(0, len(seqs), chunk):
        acts = S.read_activations(reader, seqs[start:start + chunk], batch_size=settings.batch_size,
                                  pad_id=_pad_id(tokenizer), norm_threshold=sae.norm_threshold, device=device,
                                  progress=f"labels {start}/{len(seqs)}" if start == 0 else None)
        positions += len(acts.acts)
        for s0 in range(0, len(acts.acts), 2048):
            a = sae.encode(acts.acts[s0:s0 + 2048].to(device)).float().cpu()
            fired += (a > 0).sum(0)
            r, c = (a > 0).nonzero(as_tuple=True)
            top = pl.concat([top, pl.DataFrame(
                {"concept": c.tolist(), "activation": a[r, c].tolist(),
                 "seq": (acts.seq[s0:s0 + 2048][r] + start).tolist(), "pos": acts.pos[s0:s0 + 2048][r].tolist()},
                schema=top.schema)])
            top = top.sort(["concept", "activation", "seq", "pos"], descending=[False, True, False, False]) \
                .group_by("concept", maintain_order=True).head(n)
    stats = pl.DataFrame({"concept": list(range(sae.d_sae)), "n_fired": fired.tolist()},
                         schema={"concept": pl.Int32, "n_fired": pl.Int64})
    stats = stats.with_columns(density=pl.col("n_fired") / max(positions, 1))
    return stats, top


def short_label(tokens: list[str], activations: list[float], n: int = 3) -> str | None:
    """The n token strings most often among the top examples (ties: the higher activation first)."""
    if not tokens:
        return None
    score: dict[str, tuple[int, float]] = {}
    for t, a in zip(tokens, activations):
        c, m = score.get(t, (0, 0.0))
        score[t] = (c + 1, max(m, a))
    best = sorted(score, key=lambda t: (-score[t][0], -score[t][1], t))[:n]
    return " | ".join(best)


def concept_labels_file(sae_folder: str | Path, model_dir: str | Path, out: str | Path, config: dict, *,
                        model: str, device: str = "cpu") -> pl.DataFrame:
    """Write labels.parquet for every latent of the SAE (latents that never fire get no label)."""
    s = ConceptSettings.from_config(config)
    sae, reader, tok = open_with_reader(sae_folder, model_dir, device)
    corpus = pl.read_parquet(Path(sae_folder) / "corpus.parquet")
    seqs = [list(x) for x in corpus["input_ids"].to_list()]
    stats, top = max_activating(sae, reader, tok, seqs, s, device)
    ctx = s.context_tokens
    ex_rows = []
    for r in top.iter_rows(named=True):
        ids = seqs[r["seq"]]
        p = r["pos"]
        context = (tok.decode(ids[max(0, p - ctx):p]) + "[[" + tok.decode([ids[p]]) + "]]"
                   + tok.decode(ids[p + 1:p + 1 + max(1, ctx // 4)]))
        ex_rows.append({"concept": r["concept"], "activation": r["activation"],
                        "token": _token_text(tok, ids[p]), "context": context.replace("\n", "⏎")})
    ex = pl.DataFrame(ex_rows, schema={"concept": pl.Int32, "activation": pl.Float32, "token": pl.Utf8,
                                       "context": pl.Utf8})
    per = ex.group_by("concept", maintain_order=True).agg(
        top_tokens=pl.col("token"), top_activations=pl.col("activation"),
        examples=pl.struct("activation", "token", "context"), max_activation=pl.col("activation").max())
    labels = [short_label(t, a) for t, a in zip(per["top_tokens"].to_list(), per["top_activations"].to_list())]
    per = per.with_columns(label=pl.Series(labels, dtype=pl.Utf8)).drop("top_activations")
    df = stats.join(per, on="concept", how="left").with_columns(model=pl.lit(model))
    llm = [None] * len(df)
    if s.labeler:
        llm = llm_labels(s.labeler, df)
    df = df.with_columns(llm_label=pl.Series(llm, dtype=pl.Utf8)).select(
        "model", "concept", "label", "llm_label", "n_fired", "density", "max_activation", "top_tokens", "examples")
    write_parquet(df, out)
    live = int((df["n_fired"] > 0).sum())
    log.info("labels: %d latents, %d fire on the corpus", len(df), live)
    return df


LABELER_PROMPT = (
    "Below are text snippets in which one hidden feature of a language model is most active. "
    "The token where it fires is marked [[like this]].\n\n{examples}\n\n"
    "What do the marked tokens have in common? Reply with a label of at most four words."
)


def llm_labels(spec: dict, df: pl.DataFrame) -> list[str | None]:
    """Labels written by a labeler LLM (config concepts.labels.labeler: `model`, a model entry
    like those of `models`; max_concepts: label the most often firing ones, null: all that fire;
    max_new_tokens; examples shown per concept)."""
    from .models import load_source

    imported = load_source(spec["model"])
    model, tok = imported.model.eval(), imported.tokenizer
    order = df.with_row_index("row").filter(pl.col("n_fired") > 0).sort(["n_fired", "concept"], descending=[True, False])
    max_concepts = spec.get("max_concepts", 100)
    if max_concepts is not None:
        order = order.head(int(max_concepts))
    out: list[str | None] = [None] * len(df)
    for r in order.iter_rows(named=True):
        snippets = "\n".join(f"- {e['context']}" for e in (r["examples"] or [])[: int(spec.get("examples", 5))])
        msg = LABELER_PROMPT.format(examples=snippets)
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template([{"role": "user", "content": msg}], tokenize=False, add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False, return_tensors="pt")
        else:
            ids = tok(msg + "\nLabel:", return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(**ids, max_new_tokens=int(spec.get("max_new_tokens", 8)), do_sample=False,
                                 pad_token_id=_pad_id(tok))
        text = tok.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        out[r["row"]] = (text.strip().splitlines() or [""])[0].strip(" .\"'") or None
    return out
