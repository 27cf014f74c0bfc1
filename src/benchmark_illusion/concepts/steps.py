"""The concept stage's file steps (Bohacek et al., "Uncovering Competency Gaps in Large
Language Models and Their Benchmarks"): the dense model's SAE (`build_sae`), its latents'
labels (`concept_labels_file`), every item's concept activations
(`concept_activations_file`), and the concept tables added to the metric database
(`build_gaps_database`). The other stages' steps are in their own `steps.py` (docs/design.md
lists where each lives).
Only `build_gaps_database` runs in a light job (no torch): the others import the model side
when they run.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import duckdb
import polars as pl

from benchmark_illusion.concepts.gap_settings import GapSettings
from benchmark_illusion.concepts.gaps import (
    load_concept_tables,
    load_sae_fits,
    run_concept_sql,
    stability,
)
from benchmark_illusion.io import write_parquet
from benchmark_illusion.metrics import dbfile

log = logging.getLogger("benchmark_illusion")


def build_sae(
    model_dir: str | Path,
    out_dir: str | Path,
    params: dict,
    *,
    item_files=(),
    calibration=None,
    pretrained: dict | None = None,
    device: str = "cpu",
) -> dict:
    """Train (or load) the model's SAE and write out_dir atomically; returns the fit statistics.

    params: the rule's (benchmark_illusion.config.params.sae): seed, prompt,
    concepts.layer / sae / batch_size.
    Raises SAEError when the held-out FVE is below concepts.sae.fve_floor (nothing is written).
    """
    from benchmark_illusion.concepts.activations import (
        ConceptSettings,
        build_corpus,
    )
    from benchmark_illusion.concepts.residual import ResidualReader
    from benchmark_illusion.concepts.sae import SAELensAdapter
    from benchmark_illusion.concepts.sae_build import (
        check_fve_floor,
        corpus_reader,
        corpus_stats,
        resolve_hook,
        train_sae,
        write_sae_folder,
    )
    from benchmark_illusion.concepts.sae_train import fit_stats, pca_fve
    from benchmark_illusion.evaluation.engine import pad_id
    from benchmark_illusion.evaluation.prompts import PromptSettings
    from benchmark_illusion.models.checkpoints import load_checkpoint

    t0 = time.perf_counter()
    s = ConceptSettings.for_sae(params)
    prompt = PromptSettings(**params["prompt"])
    model, tok = load_checkpoint(model_dir, device=device)
    hook, src = resolve_hook(model, s, pretrained)
    reader = ResidualReader(model, hook)
    corpus = build_corpus(tok, prompt, s, item_files=item_files, calibration=calibration)
    seqs = [list(x) for x in corpus["input_ids"].to_list()]
    read, threshold = corpus_reader(reader, seqs, s, pad_id(tok), device)
    log.info(
        "SAE corpus: %d sequences, %d tokens; hook %s; norm threshold %.1f",
        len(seqs),
        sum(map(len, seqs)),
        hook,
        threshold,
    )

    split = corpus["split"].to_list()
    train_idx = [i for i, sp in enumerate(split) if sp == "train"]
    held_idx = [i for i, sp in enumerate(split) if sp == "heldout"]
    held = read(held_idx)
    meta = {
        "model_name": Path(model_dir).name,
        "hook_name": hook,
        "norm_threshold": threshold,
        "norm_factor": s.norm_factor,
        "trained_by": "benchmark_illusion",
    }
    if src is not None:
        sae, history, train_acts = SAELensAdapter(src, meta), [], None
    else:
        sae, history, train_acts = train_sae(
            read, train_idx, seqs, model.config.hidden_size, s, meta
        )
    stats = fit_stats(sae, held.acts)
    stats.update(
        hook_name=hook,
        d_sae=sae.d_sae,
        k=getattr(sae, "k", None),
        norm_threshold=threshold,
        heldout_positions=len(held.acts),
        heldout_excluded=held.n_excluded,
        **corpus_stats(corpus, seqs),
        source="pretrained" if pretrained else "train",
        pretrained=pretrained,
        fve_floor=s.fve_floor,
        history=history,
        seconds=round(time.perf_counter() - t0, 1),
    )
    if train_acts is not None and sae.k:
        stats["pca_fve_same_k"] = pca_fve(train_acts, held.acts, int(sae.k))
    log.info(
        "SAE fit on %d held-out positions: FVE %.3f, L0 %.1f, dead %.4f",
        len(held.acts),
        stats["fve"],
        stats["l0"],
        stats["dead_fraction"],
    )
    check_fve_floor(stats, s.fve_floor, Path(model_dir).name, hook)
    write_sae_folder(out_dir, sae, src, meta, corpus, stats)
    return stats


def concept_labels_file(
    sae_folder: str | Path,
    model_dir: str | Path,
    out: str | Path,
    params: dict,
    *,
    model: str,
    device: str = "cpu",
) -> pl.DataFrame:
    """Write labels.parquet for every latent of the SAE (latents that never fire get no label).

    params: the rule's (benchmark_illusion.config.params.labels): concepts.batch_size,
    concepts.labels.
    """
    from benchmark_illusion.concepts.activations import (
        ConceptSettings,
        open_with_reader,
    )
    from benchmark_illusion.concepts.labels import (
        examples_in_context,
        llm_labels,
        max_activating,
        short_label,
    )

    s = ConceptSettings.for_labels(params)
    sae, reader, tok = open_with_reader(sae_folder, model_dir, device)
    corpus = pl.read_parquet(Path(sae_folder) / "corpus.parquet")
    seqs = [list(x) for x in corpus["input_ids"].to_list()]
    stats, top = max_activating(sae, reader, tok, seqs, s, device)
    ex = examples_in_context(tok, seqs, top, s.context_tokens)
    per = ex.group_by("concept", maintain_order=True).agg(
        top_tokens=pl.col("token"),
        top_activations=pl.col("activation"),
        examples=pl.struct("activation", "token", "context"),
        max_activation=pl.col("activation").max(),
    )
    labels = [
        short_label(t, a)
        for t, a in zip(per["top_tokens"].to_list(), per["top_activations"].to_list(), strict=True)
    ]
    per = per.with_columns(label=pl.Series(labels, dtype=pl.Utf8)).drop("top_activations")
    df = stats.join(per, on="concept", how="left").with_columns(model=pl.lit(model))
    llm = [None] * len(df)
    if s.labeler:
        llm = llm_labels(s.labeler, df)
    df = df.with_columns(llm_label=pl.Series(llm, dtype=pl.Utf8)).select(
        "model",
        "concept",
        "label",
        "llm_label",
        "n_fired",
        "density",
        "max_activation",
        "top_tokens",
        "examples",
    )
    write_parquet(df, out)
    live = int((df["n_fired"] > 0).sum())
    log.info("labels: %d latents, %d fire on the corpus", len(df), live)
    return df


def concept_activations_file(
    sae_folder: str | Path,
    model_dir: str | Path,
    items_file: str | Path,
    out: str | Path,
    out_tokens: str | Path,
    params: dict,
    *,
    model: str,
    dataset: str,
    lang: str,
    device: str = "cpu",
) -> int:
    """Write the sparse per-item concept activations of one benchmark; returns the row count.

    params: the rule's (benchmark_illusion.config.params.activations): prompt, concepts.tokens,
    concepts.batch_size.
    """
    from benchmark_illusion.concepts.activations import (
        ACTIVATION_SCHEMA,
        TOKENS_SCHEMA,
        ConceptSettings,
        item_concepts,
        open_with_reader,
    )
    from benchmark_illusion.evaluation.prompts import PromptSettings

    s = ConceptSettings.for_activations(params)
    sae, reader, tok = open_with_reader(sae_folder, model_dir, device)
    items = pl.read_parquet(items_file).to_dicts()
    a, n_tok, n_exc = item_concepts(
        sae, reader, tok, PromptSettings(**params["prompt"]), items, s, device
    )
    idx = a.nonzero(as_tuple=False)
    ids = [it["item_id"] for it in items]
    base = {"model": model, "dataset": dataset, "lang": lang}
    rows = pl.DataFrame(
        {
            **{k: [v] * len(idx) for k, v in base.items()},
            "item_id": [ids[i] for i in idx[:, 0].tolist()],
            "concept": idx[:, 1].tolist(),
            "activation": a[idx[:, 0], idx[:, 1]].tolist(),
        },
        schema=ACTIVATION_SCHEMA,
    )
    tokens = pl.DataFrame(
        {
            **{k: [v] * len(items) for k, v in base.items()},
            "item_id": ids,
            "n_tokens": n_tok,
            "n_excluded": n_exc,
        },
        schema=TOKENS_SCHEMA,
    )
    write_parquet(rows, out)
    write_parquet(tokens, out_tokens)
    log.info(
        "%s/%s: %d items, %d (item, concept) rows, %.1f active concepts per item",
        dataset,
        lang,
        len(items),
        len(rows),
        len(rows) / max(len(items), 1),
    )
    return len(rows)


def build_gaps_database(
    stage_db: str | Path,
    out_db: str | Path,
    *,
    activations: list[str],
    tokens: list[str],
    labels: list[str],
    sql_files: list[str],
    settings: GapSettings,
    sae_fits: dict[str, str] | None = None,
    log_path: str = "logs/competency_gaps.log",
) -> None:
    """Copy the metric database, add the concept tables, write out_db atomically (stopping
    first when another process holds out_db read-write: dbfile.replace_database).

    sae_fits: model -> its SAE's fit.json (table concept_sae).
    """
    settings.check()
    with dbfile.replace_database(out_db, log_path) as tmp:
        shutil.copyfile(stage_db, tmp)
        con = duckdb.connect(str(tmp))
        con.execute("SET enable_progress_bar = false")
        try:
            load_concept_tables(con, activations, tokens, labels)
            if sae_fits:
                load_sae_fits(con, sae_fits)
            run_concept_sql(con, sql_files, settings)
            stab = stability(con, sql_files, settings)
            if len(stab):
                con.register("stab", stab)
                con.execute("CREATE OR REPLACE TABLE concept_stability AS SELECT * FROM stab")
                con.unregister("stab")
            else:
                con.execute("""CREATE OR REPLACE TABLE concept_stability
                    (model VARCHAR, metric VARCHAR, scope VARCHAR,
                    repeats INTEGER, fraction DOUBLE, n_values BIGINT, median_abs_change DOUBLE,
                    p90_abs_change DOUBLE, max_abs_change DOUBLE, median_rel_change DOUBLE,
                    p90_rel_change DOUBLE, median_spearman DOUBLE)""")
            for name in (
                "chi_bench",
                "coverage_gaps",
                "chi_model",
                "model_gaps",
                "concept_damage",
                "concept_damage_tests",
                "concept_stability",
            ):
                n = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
                log.info("%s: %d rows", name, n)
        finally:
            con.close()
