"""The SAE modules (sae, residual, sae_train, sae_build, concepts, labels): reading the residual
stream, TopK encoding, fit statistics, the SAELens on-disk format (both directions, checked against
SAELens itself), corpus and item tokens, the concept settings, labels, and training on the real
bundled model (FVE floor)."""

from __future__ import annotations

import json

import polars as pl
import pytest
import torch

from benchmark_illusion.concepts import activations as C
from benchmark_illusion.concepts import labels as L
from benchmark_illusion.concepts import residual as R
from benchmark_illusion.concepts import sae as S
from benchmark_illusion.concepts import sae_train as T
from benchmark_illusion.concepts import steps
from benchmark_illusion.config import params as rule_params
from benchmark_illusion.config.validate import validate_config
from benchmark_illusion.evaluation.prompts import PromptSettings, item_body, user_message
from config.test_config import minimal
from conftest import make_tiny_model


def random_sae(d_in=16, d_sae=64, k=4, arch="topk", seed=0, **kw) -> S.SparseAutoencoder:
    torch.manual_seed(seed)
    sae = S.SparseAutoencoder(
        d_in,
        d_sae,
        architecture=arch,
        k=k if arch == "topk" else None,
        metadata={"hook_name": "blocks.0.hook_resid_post"},
        **kw,
    )
    with torch.no_grad():
        for p in sae.parameters():
            p.normal_()
    return sae


# ---------------------------------------------------------------------------------------------
# reading activations


@pytest.mark.parametrize("layer", [0, 1])
def test_resid_post_is_the_output_of_the_block(layer):
    model = make_tiny_model(50, layers=3)
    ids = torch.randint(3, 50, (2, 7))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        hs = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    post = R.ResidualReader(model, f"blocks.{layer}.hook_resid_post")(ids, mask)
    pre = R.ResidualReader(model, f"blocks.{layer}.hook_resid_pre")(ids, mask)
    torch.testing.assert_close(post, hs[layer + 1])
    torch.testing.assert_close(pre, hs[layer])


def test_bad_hooks_are_refused():
    model = make_tiny_model(50, layers=2)
    with pytest.raises(S.SAEError, match="2 decoder layers"):
        R.ResidualReader(model, "blocks.2.hook_resid_post")
    with pytest.raises(S.SAEError, match="residual-stream"):
        R.ResidualReader(model, "blocks.0.attn.hook_z")


def test_read_activations_drops_padding_masked_and_extreme_norm_positions():
    model = make_tiny_model(50, layers=2)
    reader = R.ResidualReader(model, "blocks.0.hook_resid_post")
    seqs = [[5, 6, 7, 8], [9, 10]]
    full = R.read_activations(reader, seqs, batch_size=2, pad_id=0)
    assert (
        len(full.acts) == 6
        and full.seq.tolist() == [0, 0, 0, 0, 1, 1]
        and full.pos.tolist() == [0, 1, 2, 3, 0, 1]
    )
    # the same positions, read one sequence at a time (right padding changes nothing)
    alone = R.read_activations(reader, seqs[1:], batch_size=1, pad_id=0)
    torch.testing.assert_close(alone.acts, full.acts[4:], atol=1e-5, rtol=1e-5)
    keep = [[False, True, True, False], [True, False]]
    part = R.read_activations(reader, seqs, batch_size=2, pad_id=0, keep=keep)
    assert part.pos.tolist() == [1, 2, 0] and part.n_excluded == 0
    norms = full.acts.norm(dim=-1)
    cut = float(norms.sort().values[-2])  # the largest norm is above the threshold
    capped = R.read_activations(reader, seqs, batch_size=2, pad_id=0, norm_threshold=cut)
    assert len(capped.acts) == 5 and capped.n_excluded == 1
    assert float(capped.acts.norm(dim=-1).max()) <= cut


def test_batches_are_right_padded_in_order():
    got = list(R.batches([[5, 6, 7], [8], [9, 10], [11]], 2, pad_id=0))
    assert [list(r) for r, _, _ in got] == [[0, 1], [2, 3]]
    assert got[0][1].tolist() == [[5, 6, 7], [8, 0, 0]] and got[0][2].tolist() == [
        [1, 1, 1],
        [1, 0, 0],
    ]
    assert got[1][1].tolist() == [[9, 10], [11, 0]] and got[1][2].tolist() == [[1, 1], [1, 0]]
    assert got[0][1].dtype == got[0][2].dtype == torch.long


# ---------------------------------------------------------------------------------------------
# encoding, fit statistics


def test_topk_encode_by_hand():
    sae = S.SparseAutoencoder(2, 3, architecture="topk", k=2, apply_b_dec_to_input=True)
    with torch.no_grad():
        sae.W_enc.copy_(torch.tensor([[1.0, 0.0, -1.0], [0.0, 2.0, 1.0]]))
        sae.b_enc.copy_(torch.tensor([0.0, -1.0, 0.0]))
        sae.b_dec.copy_(torch.tensor([1.0, 0.0]))
    # x - b_dec = [2, 1] -> pre = [2, 1, -1]: top 2 = latents 0 and 1
    torch.testing.assert_close(
        sae.encode(torch.tensor([[3.0, 1.0]])), torch.tensor([[2.0, 1.0, 0.0]])
    )
    # x - b_dec = [-1, 0.25] -> pre = [-1, -0.5, 1.25]: top 2 = latents 2 and 1, ReLU zeroes -0.5
    torch.testing.assert_close(
        sae.encode(torch.tensor([[0.0, 0.25]])), torch.tensor([[0.0, 0.0, 1.25]])
    )


def test_topk_relu_by_hand():
    pre = torch.tensor([[3.0, -1.0, 2.0, 0.5], [-2.0, -3.0, -1.0, -4.0]])
    acts, vals, idx = S.topk_relu(pre, 2)
    # row 0: latents 0 and 2; row 1: the top 2 (-1, -2) are negative, the ReLU zeroes them
    torch.testing.assert_close(acts, torch.tensor([[3.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    assert sorted(idx[0].tolist()) == [0, 2] and sorted(idx[1].tolist()) == [0, 2]
    assert sorted(vals[1].tolist()) == [-2.0, -1.0]  # before the ReLU (training reads which fired)


def test_encode_is_topk_relu_of_the_pre_activations():
    sae = random_sae()
    x = torch.randn(10, 16)
    acts = sae.encode(x)
    assert torch.equal(acts, S.topk_relu(sae.pre_activations(x), 4)[0])
    assert int((acts > 0).sum(-1).max()) <= 4


def test_jumprelu_and_standard_encode_by_hand():
    x = torch.tensor([[1.0, -2.0]])
    for arch, expected in (("standard", [[1.0, 0.0, 0.5]]), ("jumprelu", [[1.0, 0.0, 0.0]])):
        sae = S.SparseAutoencoder(2, 3, architecture=arch, apply_b_dec_to_input=False)
        with torch.no_grad():
            sae.W_enc.copy_(torch.tensor([[1.0, 1.0, 0.5], [0.0, 1.0, 0.0]]))
            if arch == "jumprelu":
                sae.threshold.copy_(torch.tensor([0.5, 0.5, 0.6]))
        torch.testing.assert_close(sae.encode(x), torch.tensor(expected))


def test_fve_and_fit_stats_by_hand():
    x = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])  # mean (1, 1), total var 8
    assert T.fve(x, x) == 1.0
    assert T.fve(x, x.mean(0).expand_as(x)) == 0.0
    assert T.fve(x, x + torch.tensor([1.0, 0.0])) == pytest.approx(1 - 4 / 8)
    sae = S.SparseAutoencoder(2, 2, architecture="topk", k=1, apply_b_dec_to_input=False)
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2))
        sae.W_dec.copy_(torch.eye(2))
    # k=1 keeps the larger coordinate: [0,0] -> 0, [2,0] -> exact, [0,2] -> exact,
    # [2,2] -> one 2 lost
    stats = T.fit_stats(sae, x)
    assert stats["fve"] == pytest.approx(1 - 4 / 8)
    assert stats["l0"] == pytest.approx(3 / 4)
    assert stats["dead_fraction"] == 0.0


def test_pca_fve_is_exact_for_data_of_that_rank():
    torch.manual_seed(0)
    basis = torch.randn(3, 10)
    train, test = torch.randn(200, 3) @ basis, torch.randn(50, 3) @ basis
    assert T.pca_fve(train, test, 3) == pytest.approx(1.0, abs=1e-6)
    assert T.pca_fve(train, test, 1) < 0.9


# ---------------------------------------------------------------------------------------------
# on-disk format


@pytest.mark.parametrize("arch", ["topk", "jumprelu", "standard"])
def test_save_and_load_give_identical_activations(tmp_path, arch):
    sae = random_sae(arch=arch)
    sae.save(tmp_path / "sae")
    back = S.load_sae(tmp_path / "sae")
    x = torch.randn(20, 16)
    assert torch.equal(back.encode(x), sae.encode(x))
    assert back.hook_name == "blocks.0.hook_resid_post"
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["architecture"] == arch and cfg["d_sae"] == 64


def test_a_failed_save_leaves_the_previous_folder_intact(tmp_path, monkeypatch):
    first = random_sae()
    first.save(tmp_path / "sae")
    second = random_sae(seed=1)

    def broken(folder):
        (folder / "cfg.json").write_text("{}")
        raise OSError("disk full")

    monkeypatch.setattr(second, "write_into", broken)
    with pytest.raises(OSError, match="disk full"):
        second.save(tmp_path / "sae")
    x = torch.randn(4, 16)
    assert torch.equal(S.load_sae(tmp_path / "sae").encode(x), first.encode(x))
    assert [p.name for p in tmp_path.iterdir()] == ["sae"]


def test_load_refuses_folders_that_are_not_saes(tmp_path):
    with pytest.raises(S.SAEError, match="not an SAE folder"):
        S.load_sae(tmp_path)


@pytest.mark.parametrize("arch", ["topk", "jumprelu", "standard"])
def test_saelens_reads_our_folders_and_we_read_theirs(tmp_path, arch):
    """Both directions, against SAELens itself (installed by `make test` through the dev extra)."""
    from sae_lens import SAE

    ours = random_sae(arch=arch)
    ours.save(tmp_path / "ours")
    theirs = SAE.load_from_disk(str(tmp_path / "ours"), device="cpu")
    assert theirs.cfg.metadata.hook_name == "blocks.0.hook_resid_post"  # metadata survives
    x = torch.randn(30, 16)
    torch.testing.assert_close(theirs.encode(x), ours.encode(x))
    torch.testing.assert_close(theirs(x), ours.reconstruct(x))
    theirs.save_model(tmp_path / "theirs")
    back = S.load_sae(tmp_path / "theirs")
    torch.testing.assert_close(back.encode(x), theirs.encode(x))


def test_unsupported_saelens_architectures_go_through_saelens(tmp_path):
    sae = random_sae()
    sae.save(tmp_path / "s")
    cfg = json.loads((tmp_path / "s" / "cfg.json").read_text())
    cfg["normalize_activations"] = "layer_norm"
    (tmp_path / "s" / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(S.UnsupportedSAE):
        S.load_sae(tmp_path / "s")
    adapted = S.open_sae(tmp_path / "s")
    x = torch.randn(5, 16)
    expected = sae.encode(
        (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)
    )  # SAELens: unbiased std
    torch.testing.assert_close(adapted.encode(x), expected, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# training (tiny data)


def test_training_is_seeded_and_learns_a_sparse_dictionary():
    torch.manual_seed(0)
    atoms = torch.randn(32, 12)
    codes = torch.zeros(3000, 32)
    idx = torch.randint(0, 32, (3000, 2))
    codes.scatter_(1, idx, torch.rand(3000, 2) + 0.5)
    x = codes @ atoms + 5.0  # offset: the fold of b_dec and the input scale is exercised

    def read(indices):
        rows = torch.cat([x[i * 100 : (i + 1) * 100] for i in indices])
        return R.Activations(
            rows,
            torch.zeros(len(rows), dtype=torch.long),
            torch.zeros(len(rows), dtype=torch.long),
            0,
        )

    settings = T.TrainSettings(
        width=64, k=4, epochs=30, batch_tokens=256, lr=3e-3, dead_tokens=2000, seed=3
    )
    a, _ = T.train_topk(
        T.ActivationStream(read, list(range(25)), [100] * 25, 10_000, 3),
        12,
        settings,
        progress=False,
    )
    b, hist = T.train_topk(
        T.ActivationStream(read, list(range(25)), [100] * 25, 10_000, 3),
        12,
        settings,
        progress=False,
    )
    assert torch.equal(a.W_enc, b.W_enc)
    held = x[2500:]
    stats = T.fit_stats(a, held)
    pca = T.pca_fve(x[:2500], held, 4)
    assert stats["fve"] > 0.85 and stats["fve"] > pca + 0.2, (stats, pca)
    assert hist[-1]["train_fve"] > hist[0]["train_fve"]
    # streamed in buffers smaller than the data: same kind of fit
    c, _ = T.train_topk(
        T.ActivationStream(read, list(range(25)), [100] * 25, 700, 3), 12, settings, progress=False
    )
    assert T.fit_stats(c, held)["fve"] > 0.85


# ---------------------------------------------------------------------------------------------
# corpus, item tokens, labels


ITEM = {
    "item_id": "en-1",
    "lang": "en",
    "dataset": "d",
    "context": "Paris is the capital of France.",
    "question": "What is the capital of France?",
    "answers": ["Paris"],
    "options": ["Paris", "Lyon", "Nice", "Metz"],
}


def test_item_prompt_keeps_only_the_passage_and_question_tokens(bundled_tokenizer):
    ids, keep = C.item_prompt(bundled_tokenizer, PromptSettings(), ITEM, "content")
    kept = bundled_tokenizer.decode([t for t, k in zip(ids, keep, strict=True) if k])
    assert "Paris is the capital of France." in kept and "What is the capital of France?" in kept
    assert "Read the passage" not in kept and "Answer:" not in kept and "<|im_start|>" not in kept
    all_ids, all_keep = C.item_prompt(bundled_tokenizer, PromptSettings(), ITEM, "prompt")
    assert all_ids == ids and all(all_keep) and sum(keep) < len(ids)


def test_the_item_body_is_written_once_for_prompts_and_concepts():
    body = item_body(ITEM)
    assert body in user_message(ITEM, "open") and body in user_message(ITEM, "candidates")


def test_item_prompt_names_the_item_when_its_body_is_not_in_the_prompt(
    bundled_tokenizer, monkeypatch
):
    # a chat template that trims the user turn drops the question's trailing spaces
    monkeypatch.setattr(
        bundled_tokenizer,
        "chat_template",
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n"
        "{% endfor %}<|im_start|>assistant\n",
    )
    item = {**ITEM, "question": ITEM["question"] + "  "}
    with pytest.raises(ValueError, match="item 'en-1': its passage and question"):
        C.item_prompt(bundled_tokenizer, PromptSettings(), item, "content")
    ids, keep = C.item_prompt(
        bundled_tokenizer, PromptSettings(), item, "prompt"
    )  # every token: no search
    assert all(keep)


def test_concept_settings_defaults_are_the_schemas():
    """Each rule's settings from the params its rule passes (a minimal config, schema defaults
    filled in) equal the dataclass defaults."""
    config = validate_config(minimal())
    assert C.ConceptSettings.for_sae(rule_params.sae(config, "m")) == C.ConceptSettings()
    assert C.ConceptSettings.for_labels(rule_params.labels(config)) == C.ConceptSettings()
    assert C.ConceptSettings.for_activations(rule_params.activations(config)) == C.ConceptSettings()
    assert (
        T.TrainSettings.from_config(config["concepts"]["sae"], config["seed"]) == T.TrainSettings()
    )


def test_concept_settings_read_the_keys_they_need_without_fallbacks():
    config = validate_config(minimal())
    params = rule_params.sae(config, "m")
    del params["concepts"]["sae"]["norm_factor"]
    with pytest.raises(KeyError, match="norm_factor"):
        C.ConceptSettings.for_sae(params)
    with pytest.raises(KeyError, match="labels"):
        C.ConceptSettings.for_labels({"concepts": {"batch_size": 8}})
    with pytest.raises(KeyError, match="tokens"):
        C.ConceptSettings.for_activations({"prompt": {}, "concepts": {"batch_size": 8}})


def test_corpus_is_seeded_split_and_capped(tmp_path, bundled_tokenizer):
    items = pl.DataFrame(
        [{**ITEM, "item_id": f"en-{i}", "context": f"Passage number {i}. " * 3} for i in range(20)]
    )
    items.write_parquet(tmp_path / "items.parquet")
    s = C.ConceptSettings(corpus=("items",), heldout_fraction=0.25)
    a = C.build_corpus(
        bundled_tokenizer, PromptSettings(), s, item_files=[tmp_path / "items.parquet"]
    )
    b = C.build_corpus(
        bundled_tokenizer, PromptSettings(), s, item_files=[tmp_path / "items.parquet"]
    )
    assert a.equals(b) and len(a) == 20 and (a["split"] == "heldout").sum() == 5
    capped = C.build_corpus(
        bundled_tokenizer,
        PromptSettings(),
        C.ConceptSettings(corpus=("items",), max_tokens=100),
        item_files=[tmp_path / "items.parquet"],
    )
    assert 1 <= len(capped) < 20
    with pytest.raises(S.SAEError, match="corpus is empty"):
        C.build_corpus(
            bundled_tokenizer, PromptSettings(), C.ConceptSettings(corpus=()), item_files=[]
        )


def test_short_label_by_hand():
    assert (
        L.short_label(["Paris", "France", "Paris", "Lyon", "France", "Rome"], [1, 5, 2, 1, 1, 9])
        == "France | Paris | Rome"
    )
    assert L.short_label([], []) is None


def test_max_activating_keeps_the_top_examples_per_latent():
    model = make_tiny_model(60, layers=2)
    reader = R.ResidualReader(model, "blocks.1.hook_resid_post")
    sae = random_sae(d_in=64, d_sae=8, k=2)
    sae.metadata["hook_name"] = "blocks.1.hook_resid_post"
    torch.manual_seed(1)
    seqs = [torch.randint(3, 60, (9,)).tolist() for _ in range(12)]

    class Tok:
        pad_token_id = 0

    s = C.ConceptSettings(top_examples=3, batch_size=4)
    stats, top = L.max_activating(sae, reader, Tok(), seqs, s)
    acts = R.read_activations(reader, seqs, batch_size=4, pad_id=0)
    a = sae.encode(acts.acts)
    assert stats["n_fired"].to_list() == (a > 0).sum(0).tolist()
    for c in range(8):
        want = sorted(a[:, c][a[:, c] > 0].tolist(), reverse=True)[:3]
        got = top.filter(pl.col("concept") == c)["activation"].to_list()
        assert got == pytest.approx(want, rel=1e-5)


# ---------------------------------------------------------------------------------------------
# the real bundled model (the SAE the e2e smoke run trains is tested in e2e/test_concepts.py:
# FVE floor, PCA baseline, save/reload, the pretrained source)


def test_an_sae_below_the_floor_fails_and_writes_nothing(bundled_model_dir, tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rows = json.loads((root / "resources/sample_qa/en.json").read_text())["data"]
    items = [
        {
            "item_id": qa["id"],
            "lang": "en",
            "dataset": "sample",
            "context": par["context"],
            "question": qa["question"],
        }
        for art in rows
        for par in art["paragraphs"]
        for qa in par["qas"]
    ]
    pl.DataFrame(items).write_parquet(tmp_path / "items.parquet")
    config = minimal()
    config["seed"] = 5
    config["concepts"] = {
        "layer": 15,
        "sae": {
            "width": 64,
            "k": 1,
            "epochs": 1,
            "corpus": ["items"],
            "max_tokens": 3000,
            "fve_floor": 0.95,
        },
    }
    params = rule_params.sae(validate_config(config), "m")  # what the `sae` rule passes
    with pytest.raises(S.SAEError, match=r"below concepts.sae.fve_floor = 0.95"):
        steps.build_sae(
            bundled_model_dir,
            tmp_path / "bad",
            params,
            item_files=[tmp_path / "items.parquet"],
            pretrained=params["pretrained"],
        )
    assert not (tmp_path / "bad").exists()


def test_llm_labeler_labels_the_most_often_firing_concepts(bundled_model_dir):
    """concepts.labels.labeler with the real bundled model (imported folder, source `local`)."""
    df = pl.DataFrame(
        {
            "concept": [0, 1, 2, 3],
            "n_fired": [5, 0, 9, 7],
            "examples": [
                [
                    {
                        "activation": 1.0,
                        "token": "Paris",
                        "context": f"the capital is [[Paris]] and {i}",
                    }
                ]
                for i in range(4)
            ],
        }
    )
    labels = L.llm_labels(
        {
            "model": {"source": "local", "path": str(bundled_model_dir)},
            "max_concepts": 2,
            "max_new_tokens": 6,
        },
        df,
    )
    # the two most often firing concepts (2 and 3) get a label; the rest none
    assert labels[0] is None and labels[1] is None
    assert all(isinstance(labels[i], str) and 0 < len(labels[i]) <= 80 for i in (2, 3)), labels


def test_select_equals_reading_those_sequences_alone():
    model = make_tiny_model(50, layers=2)
    reader = R.ResidualReader(model, "blocks.0.hook_resid_post")
    torch.manual_seed(2)
    seqs = [torch.randint(3, 50, (n,)).tolist() for n in (5, 9, 3, 7)]
    everything = R.read_activations(reader, seqs, batch_size=2, pad_id=0)
    cut = float(everything.acts.norm(dim=-1).median())
    part = everything.select([3, 1], cut)
    alone = R.read_activations(
        reader, [seqs[3], seqs[1]], batch_size=2, pad_id=0, norm_threshold=cut
    )
    torch.testing.assert_close(part.acts, alone.acts, atol=1e-5, rtol=1e-5)
    assert part.seq.tolist() == alone.seq.tolist() and part.pos.tolist() == alone.pos.tolist()
    assert part.n_excluded == alone.n_excluded > 0


def test_norm_threshold_uses_the_interpolated_median():
    assert float(R._median(torch.tensor([1.0, 2.0, 10.0, 4.0]))) == 3.0  # torch's .median() says 2
    assert float(R._median(torch.tensor([5.0, 1.0, 3.0]))) == 3.0
