"""The evaluation engine on a tiny random model with the real SmolLM2 tokenizer and chat template.

Every number the engine logs is recomputed here the slow, obvious way.
"""

from __future__ import annotations

import polars as pl
import pytest
import torch

from benchmark_illusion.evaluate import LOG_SCHEMA, EvalSettings, RunMeta, chosen_option, evaluate_items
from benchmark_illusion.prompts import PromptSettings, build_prompt
from conftest import make_tiny_model

ITEMS = [
    dict(item_id="en-1", lang="en", question="Where does Marta live?",
         context="Marta Quell lives in Port Alder. Her brother lives in Brennick.",
         answers=["Port Alder"], options=["Brennick", "Port Alder", "1887", "the harbour"], gold_option=1),
    dict(item_id="en-2", lang="en", question="When was the bridge built?",
         context="The Pellan Bridge was built in 1931 from grey stone. It was repaired in 1987.",
         answers=["1931"], options=["1987", "42", "1931", "120"], gold_option=2),
    dict(item_id="de-1", lang="de", question="Wie lang ist der See?",
         context="Der Mellensee ist 9 Kilometer lang. Er liegt bei Talbach.",
         answers=["9 Kilometer", "9"], options=["Talbach", "12", "Hecht", "9 Kilometer"], gold_option=3),
    dict(item_id="zh-1", lang="zh", question="他住在哪里？", context="李明住在北京。他的妹妹住在上海。",
         answers=["北京"], options=["上海", "北京", "广州", "天津"], gold_option=1),
    dict(item_id="en-3", lang="en", question="What colour is the tip of the tail?",
         context="The red fox has a bushy tail with a white tip. Its kits are born in spring.",
         answers=["white"], options=["red", "white", "kits", "spring"], gold_option=1),
]


@pytest.fixture(scope="module")
def items():
    return pl.DataFrame(ITEMS)


@pytest.fixture(scope="module")
def tiny(bundled_tokenizer):
    return make_tiny_model(len(bundled_tokenizer), seed=3)


def naive_logprob(model, prefix, cont):
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([prefix + cont])).logits[0].double(), -1)
    return float(sum(logp[len(prefix) - 1 + j, t] for j, t in enumerate(cont)))


def encode(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("prefix", ["Answer:", "Answer: "])
def test_mc_scores_equal_one_forward_per_option(tiny, bundled_tokenizer, items, prefix):
    """'Answer: ' ends in a space that merges with the option's first word: the boundary path."""
    settings = EvalSettings(prompt=PromptSettings(answer_prefix=prefix), formats=("mc",), batch_size=3)
    df = evaluate_items(tiny, bundled_tokenizer, items, settings, RunMeta("tiny"), progress=False)
    sep = " " if prefix == "Answer:" else ""
    merged = []
    for row in df.iter_rows(named=True):
        item = next(i for i in ITEMS if i["item_id"] == row["item_id"])
        prompt = build_prompt(bundled_tokenizer, settings.prompt, item, "mc")
        p_ids = encode(bundled_tokenizer, prompt)
        for k, opt in enumerate(item["options"]):
            joint = encode(bundled_tokenizer, prompt + sep + opt)
            start = next((i for i, (a, b) in enumerate(zip(joint, p_ids)) if a != b), len(p_ids))
            want = naive_logprob(tiny, joint[:start], joint[start:])
            assert row["option_ll"][k] == pytest.approx(want, abs=1e-4), (row["item_id"], k)
            assert row["option_ll_per_byte"][k] == pytest.approx(want / len(opt.encode()), abs=1e-4)
        assert row["pred_option"] == max(range(4), key=lambda k: row["option_ll"][k])
        assert row["correct"] == (row["pred_option"] == item["gold_option"])
        merged.append(row["boundary_merge"])
    assert any(merged) == (prefix == "Answer: ")


def test_gold_rank_equals_argsort_of_the_logits(tiny, bundled_tokenizer, items):
    settings = EvalSettings(formats=("open",), batch_size=4, max_new_tokens=4)
    df = evaluate_items(tiny, bundled_tokenizer, items, settings, RunMeta("tiny"), progress=False)
    for row in df.iter_rows(named=True):
        item = next(i for i in ITEMS if i["item_id"] == row["item_id"])
        prompt = build_prompt(bundled_tokenizer, settings.prompt, item, "open")
        p_ids = encode(bundled_tokenizer, prompt)
        with torch.no_grad():
            logits = tiny(input_ids=torch.tensor([p_ids])).logits[0, -1]
        order = torch.argsort(logits, descending=True).tolist()
        firsts = {encode(bundled_tokenizer, prompt + " " + a)[len(p_ids)] for a in item["answers"]}
        ranks = {t: order.index(t) + 1 for t in firsts}
        best = min(ranks, key=ranks.get)
        assert row["gold_rank"] == ranks[best]
        assert row["gold_logprob"] == pytest.approx(float(torch.log_softmax(logits, -1)[best]), abs=1e-4)


def test_batching_does_not_change_results(tiny, bundled_tokenizer, items):
    runs = [
        evaluate_items(tiny, bundled_tokenizer, items, EvalSettings(batch_size=bs, max_new_tokens=6), RunMeta("tiny"),
                       progress=False)
        for bs in (1, 5)
    ]
    a, b = runs
    assert a["output"].to_list() == b["output"].to_list()
    assert a["gold_rank"].to_list() == b["gold_rank"].to_list()
    for x, y in zip(a["option_ll"].to_list(), b["option_ll"].to_list()):
        assert (x is None and y is None) or max(abs(p - q) for p, q in zip(x, y)) < 1e-4


def test_rows_follow_the_log_schema(tiny, bundled_tokenizer, items):
    meta = RunMeta("tiny", method="wanda", structure="2:4", sparsity=0.5, dataset="d", lang="en",
                   model_hash="m", config_hash="c")
    df = evaluate_items(tiny, bundled_tokenizer, items, EvalSettings(max_new_tokens=3, seed=11), meta, progress=False)
    assert dict(df.schema) == LOG_SCHEMA
    assert df.height == 3 * len(ITEMS)
    assert df.group_by("item_id").len()["len"].to_list() == [3] * len(ITEMS)
    assert set(df["sparsity"]) == {0.5} and set(df["seed"]) == {11} and set(df["structure"]) == {"2:4"}
    assert df.filter(pl.col("format") == "open")["gold_rank"].null_count() == 0
    assert df.filter(pl.col("format") == "mc")["option_ll"].null_count() == 0
    assert (df.filter(pl.col("format") != "mc")["n_output_tokens"] <= 3).all()


def test_prompts_end_with_the_answer_prefix_in_both_template_modes(bundled_tokenizer):
    item = ITEMS[0]
    chat = build_prompt(bundled_tokenizer, PromptSettings(), item, "open")
    assert chat.startswith("<|im_start|>") and chat.endswith("<|im_start|>assistant\nAnswer:")
    plain = build_prompt(bundled_tokenizer, PromptSettings(chat_template=False), item, "candidates")
    assert "<|im_start|>" not in plain and plain.endswith("\n\nAnswer:")
    assert "B. Port Alder" in plain
    one = build_prompt(bundled_tokenizer, PromptSettings(), item, "oneshot", exemplar=ITEMS[1])
    assert one.count("Answer:") == 2 and "Answer: 1931" in one and one.endswith("Answer:")


@pytest.mark.parametrize(
    "output, expect",
    [
        (" C. Talbach", (2, "Talbach")),  # the label's text is judged, not the label
        ("C", (2, "1742")),  # a bare label stands for its option
        ("(B)", (1, "London")),
        ("D. Berlin\nmore", (3, "Berlin")),
        ("1742", (2, "1742")),  # text matching an option
        ("Somewhere else", (None, "Somewhere else")),
        ("An answer", (None, "An answer")),  # an article is not a label
    ],
)
def test_candidates_answer_parsing(output, expect):
    assert chosen_option(output, ["Paris", "London", "1742", "Berlin"], "en") == expect
