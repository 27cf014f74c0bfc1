"""Rule `concept_labels`: labels.parquet, per SAE latent its density, top tokens,
max-activating examples with context, a short label (and an LLM label when configured).

Steps (concept_labels_file): read the SAE's corpus (corpus.parquet in its folder), keep each
latent's top examples over the corpus (max_activating), give them their text (token and
context), label each latent by its most frequent top tokens (short_label) and, with
concepts.labels.labeler, by a labeler LLM (llm_labels). Definitions: docs/concepts.md.
"""

from __future__ import annotations

import logging

import polars as pl
import torch

from benchmark_illusion.concepts.activations import ConceptSettings
from benchmark_illusion.concepts.residual import ResidualReader, read_activations
from benchmark_illusion.evaluation.engine import pad_id
from benchmark_illusion.models.checkpoints import load_source

log = logging.getLogger("benchmark_illusion")


def _token_text(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id])
    return text.strip() or repr(text)


@torch.no_grad()
def max_activating(
    sae,
    reader: ResidualReader,
    tokenizer,
    seqs: list[list[int]],
    settings: ConceptSettings,
    device: str = "cpu",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per latent: (concept, n_fired, density) and its top examples (concept, activation, seq,
    pos)."""
    n = settings.top_examples
    fired = torch.zeros(sae.d_sae, dtype=torch.long)
    top = pl.DataFrame(
        schema={"concept": pl.Int32, "activation": pl.Float32, "seq": pl.Int32, "pos": pl.Int32}
    )
    positions = 0
    chunk = 8 * settings.batch_size
    for start in range(0, len(seqs), chunk):
        acts = read_activations(
            reader,
            seqs[start : start + chunk],
            batch_size=settings.batch_size,
            pad_id=pad_id(tokenizer),
            norm_threshold=sae.norm_threshold,
            device=device,
            progress=f"labels {start}/{len(seqs)}" if start == 0 else None,
        )
        positions += len(acts.acts)
        for s0 in range(0, len(acts.acts), 2048):
            a = sae.encode(acts.acts[s0 : s0 + 2048].to(device)).float().cpu()
            fired += (a > 0).sum(0)
            r, c = (a > 0).nonzero(as_tuple=True)
            top = pl.concat(
                [
                    top,
                    pl.DataFrame(
                        {
                            "concept": c.tolist(),
                            "activation": a[r, c].tolist(),
                            "seq": (acts.seq[s0 : s0 + 2048][r] + start).tolist(),
                            "pos": acts.pos[s0 : s0 + 2048][r].tolist(),
                        },
                        schema=top.schema,
                    ),
                ]
            )
            top = (
                top.sort(
                    ["concept", "activation", "seq", "pos"], descending=[False, True, False, False]
                )
                .group_by("concept", maintain_order=True)
                .head(n)
            )
    stats = pl.DataFrame(
        {"concept": list(range(sae.d_sae)), "n_fired": fired.tolist()},
        schema={"concept": pl.Int32, "n_fired": pl.Int64},
    )
    stats = stats.with_columns(density=pl.col("n_fired") / max(positions, 1))
    return stats, top


def short_label(tokens: list[str], activations: list[float], n: int = 3) -> str | None:
    """The n token strings most often among the top examples (ties: the higher activation first)."""
    if not tokens:
        return None
    score: dict[str, tuple[int, float]] = {}
    for t, a in zip(tokens, activations, strict=True):
        c, m = score.get(t, (0, 0.0))
        score[t] = (c + 1, max(m, a))
    best = sorted(score, key=lambda t: (-score[t][0], -score[t][1], t))[:n]
    return " | ".join(best)


def examples_in_context(tok, seqs: list[list[int]], top: pl.DataFrame, ctx: int) -> pl.DataFrame:
    """The top examples with their text: (concept, activation, token, context), the token marked
    [[like this]] between ctx tokens before it and max(1, ctx // 4) after it."""
    ex_rows = []
    for r in top.iter_rows(named=True):
        ids = seqs[r["seq"]]
        p = r["pos"]
        context = (
            tok.decode(ids[max(0, p - ctx) : p])
            + "[["
            + tok.decode([ids[p]])
            + "]]"
            + tok.decode(ids[p + 1 : p + 1 + max(1, ctx // 4)])
        )
        ex_rows.append(
            {
                "concept": r["concept"],
                "activation": r["activation"],
                "token": _token_text(tok, ids[p]),
                "context": context.replace("\n", "⏎"),
            }
        )
    return pl.DataFrame(
        ex_rows,
        schema={
            "concept": pl.Int32,
            "activation": pl.Float32,
            "token": pl.Utf8,
            "context": pl.Utf8,
        },
    )


LABELER_PROMPT = (
    "Below are text snippets in which one hidden feature of a language model is most active. "
    "The token where it fires is marked [[like this]].\n\n{examples}\n\n"
    "What do the marked tokens have in common? Reply with a label of at most four words."
)


# concepts.labels.labeler keys that the schema leaves without a default (the labeler may be null)
LABELER_DEFAULTS = {"max_concepts": 100, "max_new_tokens": 8, "examples": 5}


def llm_labels(spec: dict, df: pl.DataFrame) -> list[str | None]:
    """Labels written by a labeler LLM (config concepts.labels.labeler: `model`, a model entry
    like those of `models`; max_concepts: label the most often firing ones, null: all that fire;
    max_new_tokens; examples shown per concept; defaults LABELER_DEFAULTS)."""
    spec = {**LABELER_DEFAULTS, **spec}
    imported = load_source(spec["model"])
    model, tok = imported.model.eval(), imported.tokenizer
    order = (
        df.with_row_index("row")
        .filter(pl.col("n_fired") > 0)
        .sort(["n_fired", "concept"], descending=[True, False])
    )
    if spec["max_concepts"] is not None:
        order = order.head(int(spec["max_concepts"]))
    out: list[str | None] = [None] * len(df)
    for r in order.iter_rows(named=True):
        snippets = "\n".join(
            f"- {e['context']}" for e in (r["examples"] or [])[: int(spec["examples"])]
        )
        msg = LABELER_PROMPT.format(examples=snippets)
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(
                [{"role": "user", "content": msg}], tokenize=False, add_generation_prompt=True
            )
            ids = tok(text, add_special_tokens=False, return_tensors="pt")
        else:
            ids = tok(msg + "\nLabel:", return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(
                **ids,
                max_new_tokens=int(spec["max_new_tokens"]),
                do_sample=False,
                pad_token_id=pad_id(tok),
            )
        text = tok.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        out[r["row"]] = (text.strip().splitlines() or [""])[0].strip(" .\"'") or None
    return out
