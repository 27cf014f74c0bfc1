"""Recovery decodes (beam, sample, oneshot) on a tiny random model with the real tokenizer."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
import torch

from benchmark_illusion.evaluation.evaluate import LOG_SCHEMA, EvalSettings, RunMeta, evaluate_items
from benchmark_illusion.evaluation.prompts import PromptSettings, build_prompt, prompt_id
from benchmark_illusion.evaluation.recovery import RecoverySettings
from conftest import make_tiny_model
from evaluation.test_evaluate import ITEMS

EXEMPLAR = dict(
    item_id="ex-1",
    lang="en",
    question="Who built the mill?",
    context="The mill was built by Jon Tarr.",
    answers=["Jon Tarr"],
    options=["Jon Tarr", "a", "b", "c"],
    gold_option=0,
)
ITEMS_EX = [dict(i, exemplar_id="ex-1") for i in ITEMS]


@pytest.fixture(scope="module")
def tiny(bundled_tokenizer):
    return make_tiny_model(len(bundled_tokenizer), seed=4)


def run(tiny, tok, rec: RecoverySettings, max_new=4, seed=0, formats=("open", "mc")):
    rec = dataclasses.replace(rec, max_new_tokens=max_new)
    settings = EvalSettings(
        formats=formats, batch_size=3, max_new_tokens=max_new, seed=seed, recovery=rec
    )
    return evaluate_items(
        tiny,
        tok,
        pl.DataFrame(ITEMS_EX),
        settings,
        RunMeta("tiny"),
        progress=False,
        exemplars={"ex-1": EXEMPLAR},
    )


def test_beam_rows_and_top_beam_equal_unbatched_beam_search(tiny, bundled_tokenizer):
    df = run(tiny, bundled_tokenizer, RecoverySettings.only("beam", scope="all"))
    assert dict(df.schema) == LOG_SCHEMA
    beams = df.filter(pl.col("decode") == "beam")
    assert beams.height == 5 * len(ITEMS) and sorted(set(beams["sample"])) == [0, 1, 2, 3, 4]
    item = ITEMS_EX[1]
    ids = bundled_tokenizer(
        build_prompt(bundled_tokenizer, PromptSettings(), item, "open"),
        add_special_tokens=False,
        return_tensors="pt",
    )["input_ids"]
    top = beams.filter((pl.col("item_id") == item["item_id"]) & (pl.col("sample") == 0))
    budget = top["max_new_tokens"][0]
    # the gold ' 1931' is 5 tokens: the budget of 4 is raised to 5 + budget_margin (4)
    assert budget == 9
    with torch.no_grad():
        ref = tiny.generate(
            input_ids=ids,
            num_beams=5,
            num_return_sequences=1,
            do_sample=False,
            max_new_tokens=budget,
            early_stopping=True,
            pad_token_id=bundled_tokenizer.eos_token_id,
            eos_token_id=[bundled_tokenizer.eos_token_id],
        )[0, ids.shape[1] :].tolist()
    ref = [t for t in ref if t != bundled_tokenizer.eos_token_id]
    assert top["output"][0] == bundled_tokenizer.decode(ref, skip_special_tokens=True)


def test_sampling_is_seeded_and_nucleus_only(tiny, bundled_tokenizer):
    rec = RecoverySettings.only("sample", top_p=0.999, scope="all")
    a = run(tiny, bundled_tokenizer, rec, max_new=1).filter(pl.col("decode") == "sample")
    b = run(tiny, bundled_tokenizer, rec, max_new=1).filter(pl.col("decode") == "sample")
    c = run(tiny, bundled_tokenizer, rec, max_new=1, seed=1).filter(pl.col("decode") == "sample")
    assert a.height == 10 * len(ITEMS)
    assert a["output"].to_list() == b["output"].to_list()
    assert a["output"].to_list() != c["output"].to_list()
    # top_k is off: with a flat distribution, samples fall outside the 50 most likely tokens
    # (transformers' silent default top_k=50 would forbid that).
    item = ITEMS_EX[0]
    ids = bundled_tokenizer(
        build_prompt(bundled_tokenizer, PromptSettings(), item, "open"), add_special_tokens=False
    )["input_ids"]
    with torch.no_grad():
        order = torch.argsort(
            tiny(input_ids=torch.tensor([ids])).logits[0, -1], descending=True
        ).tolist()
    firsts = [
        bundled_tokenizer(o, add_special_tokens=False)["input_ids"][:1]
        for o in a.filter(pl.col("item_id") == item["item_id"])["output"]
    ]
    ranks = [order.index(f[0]) for f in firsts if f]
    assert max(ranks) >= 50


def test_oneshot_uses_the_exemplar_and_fails_without_it(tiny, bundled_tokenizer):
    df = run(tiny, bundled_tokenizer, RecoverySettings.only("oneshot", scope="all"))
    one = df.filter(pl.col("format") == "oneshot")
    assert one.height == len(ITEMS) and set(one["decode"]) == {"greedy"}
    want = prompt_id(
        build_prompt(bundled_tokenizer, PromptSettings(), ITEMS_EX[0], "oneshot", exemplar=EXEMPLAR)
    )
    assert one.filter(pl.col("item_id") == ITEMS_EX[0]["item_id"])["prompt_id"][0] == want
    settings = EvalSettings(
        formats=("open", "mc"),
        max_new_tokens=2,
        recovery=RecoverySettings.only("oneshot", scope="all"),
    )
    with pytest.raises(ValueError, match="exemplar 'ex-1' is not in the item table"):
        evaluate_items(
            tiny,
            bundled_tokenizer,
            pl.DataFrame(ITEMS_EX),
            settings,
            RunMeta("tiny"),
            progress=False,
        )


@pytest.mark.parametrize("scope", ["open_wrong", "mc_only"])
def test_scope_restricts_recovery_to_the_items_it_names(bundled_tokenizer, scope):
    tiny6 = make_tiny_model(
        len(bundled_tokenizer), seed=6
    )  # a seed whose model gets one mc item right
    df = run(tiny6, bundled_tokenizer, RecoverySettings.only("beam", "oneshot", scope=scope))
    wrong = set(
        df.filter(
            (pl.col("format") == "open") & (pl.col("decode") == "greedy") & ~pl.col("correct")
        )["item_id"]
    )
    mc_right = set(df.filter((pl.col("format") == "mc") & pl.col("correct"))["item_id"])
    want = wrong if scope == "open_wrong" else wrong & mc_right
    recovered = set(
        df.filter(pl.col("decode").is_in(["beam"]) | (pl.col("format") == "oneshot"))["item_id"]
    )
    assert recovered == want
    assert wrong == {i["item_id"] for i in ITEMS}  # a random model misses every open answer
    assert 0 < len(mc_right) < len(ITEMS)  # and gets some, not all, mc items right by chance


# Golds in scripts the byte-level tokenizer splits into many tokens (Bengali and Telugu take
# 30+ tokens, Thai 20+): a fixed budget of 16 or 24 tokens could never produce them.
LONG_GOLDS = [
    dict(
        item_id="bn-1",
        lang="bn",
        question="স্বাধীনতা কবে ঘোষণা করা হয়?",
        context="বাংলাদেশের স্বাধীনতা ১৯৭১ সালের ২৬ মার্চ ঘোষণা করা হয়। যুদ্ধ নয় মাস চলে।",
        answers=["১৯৭১ সালের ২৬ মার্চ"],
        options=["নয় মাস", "১৯৭১ সালের ২৬ মার্চ", "যুদ্ধ", "বাংলাদেশের"],
        gold_option=1,
        exemplar_id="ex-1",
    ),
    dict(
        item_id="te-1",
        lang="te",
        question="ఆలయం ఎక్కడ ఉంది?",
        context="ఆ ఆలయం తిరుపతి కొండల మీద ఉంది. అది చాలా పాతది.",
        answers=["తిరుపతి కొండల మీద"],
        options=["తిరుపతి కొండల మీద", "పాతది", "ఆలయం", "చాలా"],
        gold_option=0,
        exemplar_id="ex-1",
    ),
    dict(
        item_id="th-1",
        lang="th",
        question="เขาอยู่ที่ไหน",
        context="สมชายอยู่ที่กรุงเทพมหานคร น้องสาวของเขาอยู่ที่เชียงใหม่",
        answers=["กรุงเทพมหานคร"],
        options=["เชียงใหม่", "สมชาย", "กรุงเทพมหานคร", "น้องสาว"],
        gold_option=2,
        exemplar_id="ex-1",
    ),
]


def test_every_decode_gets_a_budget_the_longest_gold_fits_in(tiny, bundled_tokenizer):
    from benchmark_illusion.evaluation.decoding import Tokens, gold_tokens

    toks = Tokens(bundled_tokenizer, PromptSettings())
    need = {i["item_id"]: gold_tokens(toks, i["answers"]) for i in LONG_GOLDS + ITEMS_EX}
    assert (
        need["bn-1"] > 24 and need["te-1"] > 24 and need["th-1"] > 16
    )  # the problem, on the real tokenizer
    rec = RecoverySettings.only(
        "beam", "sample", "oneshot", num_beams=2, num_samples=2, max_new_tokens=3, scope="all"
    )
    settings = EvalSettings(
        formats=("open", "candidates", "mc"),
        batch_size=4,
        max_new_tokens=8,
        budget_margin=4,
        recovery=rec,
    )
    df = evaluate_items(
        tiny,
        bundled_tokenizer,
        pl.DataFrame(LONG_GOLDS + ITEMS_EX),
        settings,
        RunMeta("tiny"),
        progress=False,
        exemplars={"ex-1": EXEMPLAR},
    )
    gen = df.filter(pl.col("format") != "mc")
    assert (
        gen["max_new_tokens"].null_count() == 0
        and df.filter(pl.col("format") == "mc")["max_new_tokens"].null_count()
        == df.filter(pl.col("format") == "mc").height
    )
    for r in gen.iter_rows(named=True):
        assert r["max_new_tokens"] == max(8, need[r["item_id"]] + 4), (
            r
        )  # recovery floor 3 is raised to greedy's 8
        assert r["n_output_tokens"] <= r["max_new_tokens"]
    # a random model rarely stops: the long golds' rows write past the configured 8 tokens
    long_rows = gen.filter(pl.col("item_id") == "bn-1")
    assert long_rows["n_output_tokens"].max() > 8
    # rows of items with a short gold keep the configured budget, so batching by budget changes
    # nothing for them
    short = gen.filter(pl.col("item_id") == "en-1")
    assert need["en-1"] + 4 <= 8 and set(short["max_new_tokens"]) == {8}


def test_batches_hold_one_budget_each():
    from benchmark_illusion.evaluation.decoding import batches

    budgets = [6, 6, 30, 6, 30, 6, 6]
    order = sorted(range(7), key=lambda i: budgets[i])
    got = list(batches(order, 3, budgets))
    assert all(len({budgets[i] for i in b}) == 1 and len(b) <= 3 for b in got)
    assert sorted(i for b in got for i in b) == list(range(7))
    assert list(batches(list(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]


def test_batches_cut_before_a_much_longer_prompt():
    from benchmark_illusion.evaluation.decoding import LENGTH_SLACK, batches

    lengths = [100, 110, 125, 126, 130, 300, 700]
    got = list(batches(list(range(7)), 4, lengths=lengths))
    assert got == [[0, 1, 2], [3, 4], [5], [6]]
    assert all(lengths[b[-1]] <= LENGTH_SLACK * lengths[b[0]] for b in got)


def test_batches_hold_at_most_max_tokens_padded_to_their_longest():
    from benchmark_illusion.evaluation.decoding import batches

    lengths = [100, 110, 120, 125, 300, 320, 700]
    got = list(batches(list(range(7)), 8, lengths=lengths, max_tokens=330))
    # 3 x 120 = 360 > 330; 300 and 320 exceed the slack of 100; 700 > 330 runs alone
    assert got == [[0, 1], [2, 3], [4], [5], [6]]
    assert all(len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 330 for b in got)
    assert list(batches(list(range(7)), 8, lengths=lengths, max_tokens=10**6)) == list(
        batches(list(range(7)), 8, lengths=lengths)
    )


def test_open_and_recovery_rows_are_judged_against_a_fixed_decoy(tiny, bundled_tokenizer):
    from benchmark_illusion.evaluation.decoding import decoy_option, judge_row

    item = ITEMS[0]  # options Brennick, Port Alder (gold), 1887, the harbour
    assert decoy_option(item) == 2
    row = judge_row("1887", item, EvalSettings())
    assert row["decoy_option"] == 2 and row["decoy_correct"] and not row["correct"]
    row = judge_row("Port Alder", item, EvalSettings())
    assert row["correct"] and not row["decoy_correct"]
    # the hedge rule applies to the decoy too: naming the gold beside it is not a false recovery
    row = judge_row("1887 or Port Alder", item, EvalSettings())
    assert not row["decoy_correct"] and not row["correct"]
    assert "decoy_correct" not in judge_row("B", item, EvalSettings(), "candidates")
    df = run(tiny, bundled_tokenizer, RecoverySettings.only("beam", "oneshot", scope="all"))
    gen = df.filter(pl.col("format").is_in(["open", "oneshot"]))
    assert gen["decoy_correct"].null_count() == 0
    want = {i["item_id"]: (i["gold_option"] + 1) % 4 for i in ITEMS_EX}
    assert all(want[r["item_id"]] == r["decoy_option"] for r in gen.iter_rows(named=True))
    assert (
        df.filter(pl.col("format").is_in(["mc", "candidates"]))["decoy_correct"].null_count()
        == df.filter(pl.col("format").is_in(["mc", "candidates"])).height
    )


def test_a_distractor_inside_the_golds_occurrence_is_no_false_recovery():
    """A decode hits a distractor only where the distractor's occurrence does not overlap the
    gold's: "made of grey stone" names the gold "grey stone", not the distractor "of grey"."""
    from benchmark_illusion.evaluation.decoding import judge_row

    item = dict(
        item_id="x-1",
        lang="en",
        question="What is the wall made of?",
        context="The old wall is made of grey stone. Paper lanterns hang from it.",
        answers=["grey stone"],
        options=["of grey", "grey stone", "lanterns", "old wall"],
        gold_option=1,
    )
    row = judge_row("It is made of grey stone.", item, EvalSettings())
    assert row["correct_sentence"] and row["option_correct_sentence"] == [False, True, False, False]
    # the same distractor on its own, away from the gold, is a hit
    row = judge_row("Lanterns.", item, EvalSettings())
    assert row["option_correct"] == [False, False, True, False]


def test_the_positive_controls_ban_covers_each_golds_first_token_in_every_script(
    bundled_tokenizer,
):
    """Tokens.gold_first_tokens on the real tokenizer: for golds in Latin, Greek, CJK, Thai,
    Devanagari and Arabic script, every way the decode could start writing the gold (alone,
    after a space, capitalised) is banned, and no blank token (which would ban every answer's
    leading space) is."""
    from benchmark_illusion.evaluation.decoding import Tokens
    from benchmark_illusion.evaluation.prompts import PromptSettings

    toks = Tokens(bundled_tokenizer, PromptSettings())
    golds = ["Denver Broncos", "Αθήνα", "北京大学", "กรุงเทพมหานคร", "दिल्ली", "القاهرة", "1879"]
    for gold in golds:
        banned = set(toks.gold_first_tokens([gold]))
        assert banned, gold
        assert not any(toks.is_blank(t) for t in banned), gold
        for written in (gold, " " + gold, toks.sep + gold, gold[0].upper() + gold[1:]):
            ids = bundled_tokenizer(written, add_special_tokens=False)["input_ids"]
            first = next(i for i in ids if not toks.is_blank(i))
            assert first in banned, (gold, written)
    # several golds: the union; an empty gold bans nothing
    both = set(toks.gold_first_tokens(["Αθήνα", "1879"]))
    assert both == set(toks.gold_first_tokens(["Αθήνα"])) | set(toks.gold_first_tokens(["1879"]))
    assert toks.gold_first_tokens(["  "]) == []
