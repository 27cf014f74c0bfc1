"""Recovery decodes (beam, sample, oneshot) on a tiny random model with the real tokenizer."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
import torch

from benchmark_illusion.evaluate import LOG_SCHEMA, EvalSettings, RunMeta, evaluate_items
from benchmark_illusion.prompts import PromptSettings, build_prompt, prompt_id
from benchmark_illusion.recovery import RecoverySettings
from conftest import make_tiny_model
from test_evaluate import ITEMS

EXEMPLAR = dict(item_id="ex-1", lang="en", question="Who built the mill?", context="The mill was built by Jon Tarr.",
                answers=["Jon Tarr"], options=["Jon Tarr", "a", "b", "c"], gold_option=0)
ITEMS_EX = [dict(i, exemplar_id="ex-1") for i in ITEMS]


@pytest.fixture(scope="module")
def tiny(bundled_tokenizer):
    return make_tiny_model(len(bundled_tokenizer), seed=4)


def run(tiny, tok, rec: RecoverySettings, max_new=4, seed=0, formats=("open", "mc")):
    rec = dataclasses.replace(rec, max_new_tokens=max_new)
    settings = EvalSettings(formats=formats, batch_size=3, max_new_tokens=max_new, seed=seed, recovery=rec)
    return evaluate_items(tiny, tok, pl.DataFrame(ITEMS_EX), settings, RunMeta("tiny"), progress=False,
                          exemplars={"ex-1": EXEMPLAR})


def test_beam_rows_and_top_beam_equal_unbatched_beam_search(tiny, bundled_tokenizer):
    df = run(tiny, bundled_tokenizer, RecoverySettings(beam=True, scope="all"))
    assert dict(df.schema) == LOG_SCHEMA
    beams = df.filter(pl.col("decode") == "beam")
    assert beams.height == 5 * len(ITEMS) and sorted(set(beams["sample"])) == [0, 1, 2, 3, 4]
    item = ITEMS_EX[1]
    ids = bundled_tokenizer(build_prompt(bundled_tokenizer, PromptSettings(), item, "open"),
                            add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ref = tiny.generate(input_ids=ids, num_beams=5, num_return_sequences=1, do_sample=False, max_new_tokens=4,
                            early_stopping=True, pad_token_id=bundled_tokenizer.eos_token_id,
                            eos_token_id=[bundled_tokenizer.eos_token_id])[0, ids.shape[1]:].tolist()
    ref = [t for t in ref if t != bundled_tokenizer.eos_token_id]
    top = beams.filter((pl.col("item_id") == item["item_id"]) & (pl.col("sample") == 0))["output"][0]
    assert top == bundled_tokenizer.decode(ref, skip_special_tokens=True)


def test_sampling_is_seeded_and_nucleus_only(tiny, bundled_tokenizer):
    rec = RecoverySettings(sample=True, top_p=0.999, scope="all")
    a = run(tiny, bundled_tokenizer, rec, max_new=1).filter(pl.col("decode") == "sample")
    b = run(tiny, bundled_tokenizer, rec, max_new=1).filter(pl.col("decode") == "sample")
    c = run(tiny, bundled_tokenizer, rec, max_new=1, seed=1).filter(pl.col("decode") == "sample")
    assert a.height == 10 * len(ITEMS)
    assert a["output"].to_list() == b["output"].to_list()
    assert a["output"].to_list() != c["output"].to_list()
    # top_k is off: with a flat distribution, samples fall outside the 50 most likely tokens
    # (transformers' silent default top_k=50 would forbid that).
    item = ITEMS_EX[0]
    ids = bundled_tokenizer(build_prompt(bundled_tokenizer, PromptSettings(), item, "open"), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        order = torch.argsort(tiny(input_ids=torch.tensor([ids])).logits[0, -1], descending=True).tolist()
    firsts = [bundled_tokenizer(o, add_special_tokens=False)["input_ids"][:1] for o in
              a.filter(pl.col("item_id") == item["item_id"])["output"]]
    ranks = [order.index(f[0]) for f in firsts if f]
    assert max(ranks) >= 50


def test_oneshot_uses_the_exemplar_and_fails_without_it(tiny, bundled_tokenizer):
    df = run(tiny, bundled_tokenizer, RecoverySettings(oneshot=True, scope="all"))
    one = df.filter(pl.col("format") == "oneshot")
    assert one.height == len(ITEMS) and set(one["decode"]) == {"greedy"}
    want = prompt_id(build_prompt(bundled_tokenizer, PromptSettings(), ITEMS_EX[0], "oneshot", exemplar=EXEMPLAR))
    assert one.filter(pl.col("item_id") == ITEMS_EX[0]["item_id"])["prompt_id"][0] == want
    settings = EvalSettings(formats=("open", "mc"), max_new_tokens=2, recovery=RecoverySettings(oneshot=True, scope="all"))
    with pytest.raises(ValueError, match="exemplar 'ex-1' is not in the item table"):
        evaluate_items(tiny, bundled_tokenizer, pl.DataFrame(ITEMS_EX), settings, RunMeta("tiny"), progress=False)


@pytest.mark.parametrize("scope", ["open_wrong", "mc_only"])
def test_scope_restricts_recovery_to_the_items_it_names(bundled_tokenizer, scope):
    tiny6 = make_tiny_model(len(bundled_tokenizer), seed=6)  # a seed whose model gets one mc item right
    df = run(tiny6, bundled_tokenizer, RecoverySettings(beam=True, oneshot=True, scope=scope))
    wrong = set(df.filter((pl.col("format") == "open") & (pl.col("decode") == "greedy") & ~pl.col("correct"))["item_id"])
    mc_right = set(df.filter((pl.col("format") == "mc") & pl.col("correct"))["item_id"])
    want = wrong if scope == "open_wrong" else wrong & mc_right
    recovered = set(df.filter(pl.col("decode").is_in(["beam"]) | (pl.col("format") == "oneshot"))["item_id"])
    assert recovered == want
    assert wrong == {i["item_id"] for i in ITEMS}  # a random model misses every open answer
    assert 0 < len(mc_right) < len(ITEMS)  # and gets some, not all, mc items right by chance
