"""The smoke run's competency gaps: every concept table filled, stability on subsamples, the
trained SAE checked independently, and a pretrained SAE in SAELens' format as the source."""

from __future__ import annotations

import json
import math

import duckdb
import polars as pl
import pytest

from e2e.common import (
    N_PRUNED,
    QUANTIZED,
)
from smoke import ROOT

CONCEPT_TABLES = (
    "concept_activations",
    "concept_tokens",
    "concept_labels",
    "concept_benchmarks",
    "chi_bench",
    "coverage_gaps",
    "concept_scores",
    "chi_model",
    "model_gaps",
    "concept_damage",
    "concept_stability",
)


def test_every_concept_table_is_non_empty_and_complete(smoke_run):
    work, _ = smoke_run
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    for table in CONCEPT_TABLES:
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
    width = 1024
    # every latent has a label row; chi_bench has every latent x (2 benchmarks + across)
    assert con.execute("SELECT count(*) FROM concept_labels").fetchone() == (width,)
    assert con.execute("SELECT count(*) FROM chi_bench").fetchone() == (3 * width,)
    # every candidate item of both benchmarks has a token count and at least one active concept
    items = {
        lang: pl.read_parquet(work / f"results/items/sample/{lang}.parquet").height
        for lang in ("en", "es")
    }
    got = dict(con.execute("SELECT lang, n_items FROM concept_benchmarks").fetchall())
    assert got == items
    assert con.execute("SELECT count(DISTINCT item_id) FROM concept_activations").fetchone() == (
        sum(items.values()),
    )
    # chi_model for every checkpoint x format (the three formats and the sentence-tolerant verdict
    # of the two generated ones), per language and pooled; damage for every pruned checkpoint
    formats = {r[0] for r in con.execute("SELECT DISTINCT format FROM chi_model").fetchall()}
    assert formats == {"open", "candidates", "mc", "open_sentence", "candidates_sentence"}
    ckpts = con.execute("""SELECT count(DISTINCT (method, sparsity, format, lang)) FROM chi_model
                           WHERE population = 'selected'""").fetchone()[0]
    assert ckpts == (1 + N_PRUNED + len(QUANTIZED)) * len(formats) * 3
    assert con.execute(
        "SELECT count(DISTINCT (method, sparsity)) FROM concept_damage"
    ).fetchone() == (N_PRUNED + len(QUANTIZED),)
    assert (
        con.execute("SELECT count(*) FROM model_gaps WHERE population = 'pool'").fetchone()[0] > 0
    )
    # the gap classes exist, and a concept's class agrees with its chi_bench and the thresholds
    classes = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT coverage FROM chi_bench WHERE lang <> 'all'"
        ).fetchall()
    }
    assert {"under", "over", "typical"} <= classes
    assert con.execute("""SELECT count(*) FROM chi_bench \
WHERE (coverage = 'under' AND chi_bench > under_threshold)
                          OR (coverage = 'over' AND chi_bench < over_threshold)
                          OR (coverage = 'missing' AND n_active > 0)""").fetchone() == (0,)
    # labels: a label and examples with the marked token for every latent that fires
    lab = con.execute("""SELECT count(*) FILTER (WHERE label IS NULL OR len(examples) = 0),
                                count(*) FILTER (WHERE NOT contains(examples[1].context, '[[')) \
FROM concept_labels
                         WHERE n_fired > 0""").fetchone()
    assert lab == (0, 0)


def test_concept_stability_on_80_percent_subsamples(smoke_run):
    """chi_bench and chi_model recomputed on 3 seeded subsamples keeping 80% of each benchmark's
    items."""
    work, _ = smoke_run
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    rows = {
        (r[0], r[1]): r[2:]
        for r in con.execute(
            """SELECT metric, scope, n_values, median_abs_change, p90_abs_change, \
median_rel_change, median_spearman
           FROM concept_stability WHERE fraction = 0.8 AND repeats = 3"""
        ).fetchall()
    }
    for (metric, scope), (n, mabs, p90, mrel, rho) in sorted(rows.items()):
        print(
            f"stability {metric:9s} {scope:9s}: n={n} median |change| {mabs:.3f} (p90 {p90:.3f}), "
            f"median relative {mrel:.3f}, median Spearman {rho:.3f}"
        )
    assert set(rows) == {
        ("chi_bench", "benchmark"),
        ("chi_bench", "all"),
        ("chi_model", "benchmark"),
        ("chi_model", "all"),
    }
    # coverage: the ranking of concepts barely moves and values move by a few percent
    for scope in ("benchmark", "all"):
        n, mabs, p90, mrel, rho = rows[("chi_bench", scope)]
        assert rho > 0.95 and mrel < 0.2, rows[("chi_bench", scope)]
    # performance on <= 10 selected items per language is noisier, but still ordered alike
    n, mabs, p90, mrel, rho = rows[("chi_model", "all")]
    assert rho > 0.6 and mabs < 0.15, rows[("chi_model", "all")]


def test_smoke_sae_reaches_the_floor_beats_pca_and_reloads_identically(smoke_run):
    """Recomputed here from the SAE folder and the corpus it stored, not taken from fit.json."""

    import torch

    from benchmark_illusion.concepts import activations as C
    from benchmark_illusion.concepts import residual, sae_train
    from benchmark_illusion.concepts import sae as S
    from benchmark_illusion.evaluation.engine import pad_id
    from benchmark_illusion.evaluation.prompts import PromptSettings
    from benchmark_illusion.models.checkpoints import load_checkpoint

    work, _ = smoke_run
    out = work / "results/concepts/smollm2-135m/sae"
    sae = S.open_sae(out)
    assert isinstance(sae, S.SparseAutoencoder) and sae.hook_name == "blocks.15.hook_resid_post"
    corpus = pl.read_parquet(out / "corpus.parquet")
    assert set(corpus["source"]) == {"items", "calibration"}
    model, tok = load_checkpoint(work / "resources/models/smollm2-135m")
    reader = residual.ResidualReader(model, sae.hook_name)

    def acts(split, n=None):
        seqs = [list(x) for x in corpus.filter(pl.col("split") == split)["input_ids"].to_list()][:n]
        return residual.read_activations(
            reader, seqs, batch_size=8, pad_id=pad_id(tok), norm_threshold=sae.norm_threshold
        )

    # PCA is fitted on 30 training sequences (~6k positions, ten per dimension): enough for a
    # 576-wide covariance, and half the reading time of the whole training split
    train, held = acts("train", 30), acts("heldout")
    # the extreme-norm first position of every sequence is cut
    assert (
        math.isfinite(sae.norm_threshold)
        and held.n_excluded >= (corpus["split"] == "heldout").sum()
    )
    fit = sae_train.fit_stats(sae, held.acts)
    pca = sae_train.pca_fve(train.acts, held.acts, 32)
    stored = json.loads((out / "fit.json").read_text())
    print(
        f"smoke SAE (1024 latents, k=32, layer 15): held-out FVE {fit['fve']:.3f}, "
        f"L0 {fit['l0']:.1f}, dead {fit['dead_fraction']:.4f}; "
        f"PCA with 32 components {pca:.3f}; trained in {stored['seconds']} s"
    )
    assert fit["fve"] >= 0.6 and fit["fve"] > pca + 0.1 and fit["l0"] <= 32
    assert fit["fve"] == pytest.approx(stored["fve"], abs=1e-4)
    again = S.load_sae(out / "sae")
    assert torch.equal(again.encode(held.acts[:500]), sae.encode(held.acts[:500]))
    # a_c(x) of one item, by the definition: mean over its passage + question tokens
    item = pl.read_parquet(work / "results/items/sample/es.parquet").row(0, named=True)
    ids, keep = C.item_prompt(tok, PromptSettings(), item, "content")
    h = reader(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))[0]
    mask = torch.tensor(keep) & (h.norm(dim=-1) <= sae.norm_threshold)
    expected = sae.encode(h[mask]).mean(0)
    stored_rows = pl.read_parquet(
        work / "results/concepts/smollm2-135m/activations/sample/es.parquet"
    ).filter(pl.col("item_id") == item["item_id"])
    got = torch.zeros(sae.d_sae)
    got[stored_rows["concept"].to_list()] = torch.tensor(stored_rows["activation"].to_list())
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_pretrained_source_loads_a_saelens_folder(smoke_run, tmp_path):
    """models.<name>.sae.path: a folder in SAELens' format, read by SAELens, checked and written
    back."""
    import torch
    from sae_lens import SAE

    from benchmark_illusion.concepts.sae import open_sae
    from benchmark_illusion.concepts.steps import build_sae
    from benchmark_illusion.config import params as rule_params
    from benchmark_illusion.config.validate import load_config

    work, cfg = smoke_run
    src = work / "results/concepts/smollm2-135m/sae"
    SAE.load_from_disk(str(src / "sae")).save_model(tmp_path / "published")
    config = load_config(cfg, root=ROOT)
    config["models"]["smollm2-135m"]["sae"] = {"path": str(tmp_path / "published")}
    config["concepts"]["sae"].update(corpus=["items"], max_tokens=4000)
    params = rule_params.sae(config, "smollm2-135m")  # what the sae rule passes
    got = build_sae(
        work / "resources/models/smollm2-135m",
        tmp_path / "out",
        params,
        pretrained=params["pretrained"],
        item_files=[work / "results/items/sample/en.parquet"],
    )
    assert (
        got["source"] == "pretrained"
        and got["hook_name"] == "blocks.15.hook_resid_post"
        and got["fve"] >= 0.6
    )
    assert (tmp_path / "out/sae/cfg.json").is_file() and (tmp_path / "out/corpus.parquet").is_file()
    x = torch.randn(10, 576) * 50
    torch.testing.assert_close(open_sae(tmp_path / "out").encode(x), open_sae(src).encode(x))
