"""The no-passage control (`mc_nopassage`): the mc options scored on the mc prompt with the
passage left out, its rows, its SQL columns, and the pool that never runs it."""

from __future__ import annotations

import math

import polars as pl
import pytest

from benchmark_illusion.config import params as rule_params
from benchmark_illusion.evaluation.decoding import Tokens
from benchmark_illusion.evaluation.evaluate import (
    EvalSettings,
    RunMeta,
    evaluate_items,
    naive_logprob,
)
from benchmark_illusion.evaluation.prompts import (
    OPEN_INSTRUCTION,
    PromptSettings,
    build_prompt,
    prompt_id,
)
from benchmark_illusion.evaluation.settings import FORMATS
from conftest import BUNDLED, ROOT, make_tiny_model
from metrics.test_sql import DENSE, POOL, PRUNED, build, row

# Questions in several scripts: Latin, Greek, CJK, Thai, Devanagari, Arabic (and one whose
# question ends in a question mark of its own script).
ITEMS = [
    dict(
        item_id="en-1",
        lang="en",
        question="Where does Marta live?",
        context="Marta Quell lives in Port Alder. Her brother lives in Brennick.",
        answers=["Port Alder"],
        options=["Brennick", "Port Alder", "1887", "the harbour"],
        gold_option=1,
    ),
    dict(
        item_id="de-1",
        lang="de",
        question="Wie lang ist der See?",
        context="Der Mellensee ist 9 Kilometer lang. Er liegt bei Talbach.",
        answers=["9 Kilometer"],
        options=["Talbach", "12", "Hecht", "9 Kilometer"],
        gold_option=3,
    ),
    dict(
        item_id="el-1",
        lang="el",
        question="Πού ζει η Μαρία;",
        context="Η Μαρία ζει στην Καλαμάτα. Ο αδελφός της ζει στην Πάτρα.",
        answers=["Καλαμάτα"],
        options=["Πάτρα", "Καλαμάτα", "1887", "Αθήνα"],
        gold_option=1,
    ),
    dict(
        item_id="zh-1",
        lang="zh",
        question="他住在哪里？",
        context="李明住在北京。他的妹妹住在上海。",
        answers=["北京"],
        options=["上海", "北京", "广州", "天津"],
        gold_option=1,
    ),
    dict(
        item_id="th-1",
        lang="th",
        question="สมชายอาศัยอยู่ที่ไหน",
        context="สมชายอาศัยอยู่ที่เชียงใหม่ น้องสาวของเขาอาศัยอยู่ที่ภูเก็ต",
        answers=["เชียงใหม่"],
        options=["ภูเก็ต", "เชียงใหม่", "ขอนแก่น", "ระยอง"],
        gold_option=1,
    ),
    dict(
        item_id="hi-1",
        lang="hi",
        question="राम कहाँ रहता है?",
        context="राम जयपुर में रहता है। उसकी बहन पुणे में रहती है।",
        answers=["जयपुर"],
        options=["पुणे", "जयपुर", "१९७१", "दिल्ली"],
        gold_option=1,
    ),
    dict(
        item_id="ar-1",
        lang="ar",
        question="أين يعيش أحمد؟",
        context="يعيش أحمد في الإسكندرية. وتعيش أخته في القاهرة.",
        answers=["الإسكندرية"],
        options=["القاهرة", "الإسكندرية", "١٩٧١", "طنطا"],
        gold_option=1,
    ),
]


@pytest.fixture(scope="module")
def tiny(bundled_tokenizer):
    return make_tiny_model(len(bundled_tokenizer), seed=5)


def test_mc_nopassage_is_a_format_on_by_default():
    assert "mc_nopassage" in FORMATS and "mc_nopassage" in EvalSettings().formats


# --- the prompt ------------------------------------------------------------------------------


@pytest.mark.parametrize("chat", [True, False], ids=["chat-template", "plain"])
@pytest.mark.parametrize("item", ITEMS, ids=[i["item_id"] for i in ITEMS])
def test_nopassage_prompt_is_the_mc_prompt_without_the_passage(bundled_tokenizer, item, chat):
    """The mc prompt with exactly its passage block removed: no stray template piece (no
    'Passage:' label, no blank line left behind), the question once, the answer prefix at the
    end, and the options continue it as they continue the mc prompt."""
    settings = PromptSettings(chat_template=chat)
    mc = build_prompt(bundled_tokenizer, settings, item, "mc")
    text = build_prompt(bundled_tokenizer, settings, item, "mc_nopassage")
    block = f"Passage: {item['context']}\n\n"
    assert mc.count(block) == 1
    assert text == mc.replace(block, "")
    assert item["context"] not in text and "Passage" not in text
    assert text.count(item["question"]) == 1
    assert f"{OPEN_INSTRUCTION}\n\nQuestion: {item['question']}" in text
    assert "\n\n\n" not in text and text.endswith(settings.answer_prefix)
    # the passage's sentences are gone too, not only the passage as one string
    for part in item["context"].replace("。", ".").replace("।", ".").split("."):
        if len(part.strip()) > 4 and part.strip() not in item["question"]:
            assert part.strip() not in text, part

    toks = Tokens(bundled_tokenizer, settings)
    ids = toks.encode(text)
    assert bundled_tokenizer.decode(ids, skip_special_tokens=False).endswith(
        text[-20:]
    )  # nothing lost at the end, in any script
    mc_ids = toks.encode(mc)
    head = next(i for i, (a, b) in enumerate(zip(ids, mc_ids, strict=False)) if a != b)
    # the template's head and the instruction are the same tokens (engine.prefill shares them)
    assert bundled_tokenizer.decode(ids[:head]).rstrip().endswith(OPEN_INSTRUCTION)
    for opt in item["options"]:
        cont, start = toks.continuation(text, ids, opt)
        mc_cont, mc_start = toks.continuation(mc, mc_ids, opt)
        assert start == len(ids) and mc_start == len(mc_ids)
        assert cont == mc_cont  # the option is scored on the same tokens in both formats
        assert bundled_tokenizer.decode(cont) == toks.sep + opt


# --- the rows and their scores -----------------------------------------------------------------


def _items():
    return pl.DataFrame(ITEMS)


@pytest.mark.parametrize("prefix", ["Answer:", "Answer: "])
def test_nopassage_scores_equal_a_full_forward_per_option(tiny, bundled_tokenizer, prefix):
    """Option scores from the shared-head prefill and the batched scoring equal one full forward
    pass per option on the no-passage prompt ('Answer: ' ends in a space: boundary merges)."""
    settings = EvalSettings(
        prompt=PromptSettings(answer_prefix=prefix), formats=("mc_nopassage",), batch_size=4
    )
    df = evaluate_items(tiny, bundled_tokenizer, _items(), settings, RunMeta("t"), progress=False)
    assert df["format"].unique().to_list() == ["mc_nopassage"] and df.height == len(ITEMS)
    toks = Tokens(bundled_tokenizer, settings.prompt)
    merged = []
    for r in df.iter_rows(named=True):
        item = next(i for i in ITEMS if i["item_id"] == r["item_id"])
        text = build_prompt(bundled_tokenizer, settings.prompt, item, "mc_nopassage")
        ids = toks.encode(text)
        assert r["prompt_id"] == prompt_id(text) and r["n_prompt_tokens"] == len(ids)
        for k, opt in enumerate(item["options"]):
            cont, start = toks.continuation(text, ids, opt)
            want = naive_logprob(tiny, ids[:start], cont)
            assert r["option_ll"][k] == pytest.approx(want, abs=1e-4), (r["item_id"], k)
            assert r["option_ll_per_byte"][k] == pytest.approx(want / len(opt.encode()), abs=1e-4)
        assert r["pred_option"] == max(range(4), key=lambda k: r["option_ll"][k])
        assert r["pred_option_norm"] == max(range(4), key=lambda k: r["option_ll_per_char"][k])
        assert r["pred_option_bytes"] == max(range(4), key=lambda k: r["option_ll_per_byte"][k])
        assert r["correct"] == (r["pred_option"] == item["gold_option"])
        assert r["correct_norm"] == (r["pred_option_norm"] == item["gold_option"])
        assert r["output"] == item["options"][r["pred_option"]]
        merged.append(r["boundary_merge"])
    assert any(merged) == (prefix == "Answer: ")


def test_nopassage_rows_beside_open_and_mc(tiny, bundled_tokenizer):
    """One mc_nopassage row per item, logged like an mc row (decode loglik, the options' scores,
    the pick, the gold), on a shorter prompt; the open and mc rows are those of a run without it,
    and batching changes no score."""
    items = _items()
    with_np = evaluate_items(
        tiny,
        bundled_tokenizer,
        items,
        EvalSettings(formats=("open", "mc", "mc_nopassage"), max_new_tokens=3, batch_size=3),
        RunMeta("t"),
        progress=False,
    )
    without = evaluate_items(
        tiny,
        bundled_tokenizer,
        items,
        EvalSettings(formats=("open", "mc"), max_new_tokens=3, batch_size=3),
        RunMeta("t"),
        progress=False,
    )
    one_by_one = evaluate_items(
        tiny,
        bundled_tokenizer,
        items,
        EvalSettings(formats=("mc_nopassage",), batch_size=1),
        RunMeta("t"),
        progress=False,
    )
    assert with_np.group_by("item_id").len()["len"].to_list() == [3] * len(ITEMS)
    np_rows = with_np.filter(pl.col("format") == "mc_nopassage").sort("item_id")
    mc_rows = with_np.filter(pl.col("format") == "mc").sort("item_id")
    assert set(np_rows["decode"]) == {"loglik"} and set(np_rows["sample"]) == {0}
    assert np_rows["option_ll"].list.len().to_list() == [4] * len(ITEMS)
    assert all(math.isfinite(x) for ll in np_rows["option_ll"] for x in ll)
    assert np_rows["gold_option"].to_list() == mc_rows["gold_option"].to_list()
    assert (np_rows["n_prompt_tokens"] < mc_rows["n_prompt_tokens"]).all()
    assert (np_rows["prompt_id"] != mc_rows["prompt_id"]).all()
    assert np_rows["max_new_tokens"].null_count() == np_rows.height
    assert (np_rows["seconds"] > 0).all()
    rest = with_np.filter(pl.col("format") != "mc_nopassage").drop("seconds")
    assert rest.rows() == without.drop("seconds").rows()
    for a, b in zip(np_rows["option_ll"], one_by_one.sort("item_id")["option_ll"], strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-4


# --- the pool ----------------------------------------------------------------------------------


def test_the_pool_never_runs_it_and_carries_the_same_hash():
    from benchmark_illusion.config.validate import validate_config
    from benchmark_illusion.evaluation.steps import eval_config_hash

    config = validate_config(
        {
            "models": {"m": dict(BUNDLED)},
            "datasets": {
                "d": {
                    "source": "squad_json",
                    "path": str(ROOT / "resources/sample_qa/{lang}.json"),
                    "languages": ["en"],
                }
            },
        }
    )
    assert "mc_nopassage" in config["evaluation"]["formats"]
    full, pool = rule_params.evaluation(config), rule_params.pool_evaluation(config)
    assert "mc_nopassage" in full["evaluation"]["formats"]
    assert pool["evaluation"]["formats"] == ["open", "candidates", "mc"]
    assert eval_config_hash(pool) == eval_config_hash(full)
    # switching it off leaves the pool's params as they were: no re-run of the pool
    off = {
        **config,
        "evaluation": {**config["evaluation"], "formats": ["open", "candidates", "mc"]},
    }
    assert rule_params.pool_evaluation(off) == pool


# --- SQL ---------------------------------------------------------------------------------------

# The no-passage picks of test_sql's tables. Dense: right on i1, i4. Pruned w (open [0,0,0,1],
# mc [1,1,0,1], so MC-only i1, i2): right on i1, i4; per byte right on i1, i2.
NOPASSAGE = [
    row("dense", "i1", "mc_nopassage", True, decode="loglik", correct_norm=True),
    row("dense", "i2", "mc_nopassage", False, decode="loglik", correct_norm=False),
    row("dense", "i3", "mc_nopassage", False, decode="loglik", correct_norm=False),
    row("dense", "i4", "mc_nopassage", True, decode="loglik", correct_norm=True),
    row("w", "i1", "mc_nopassage", True, decode="loglik", correct_norm=True),
    row("w", "i2", "mc_nopassage", False, decode="loglik", correct_norm=True),
    row("w", "i3", "mc_nopassage", False, decode="loglik", correct_norm=False),
    row("w", "i4", "mc_nopassage", True, decode="loglik", correct_norm=False),
]


@pytest.fixture
def db(tmp_path):
    # the pool has no mc_nopassage rows, as in a run
    return build(tmp_path, DENSE + PRUNED + NOPASSAGE, {"en": ["i1", "i2", "i3", "i4"]}, POOL)


def _rate(con, metric, method="w", lang="en"):
    r = con.execute(
        "SELECT n_items, value FROM rates WHERE metric = ? AND method = ? AND lang = ? "
        "AND population = 'selected'",
        [metric, method, lang],
    ).fetchone()
    return None if r is None else (r[0], pytest.approx(r[1]))


def test_item_outcomes_nopassage_columns_by_hand(db):
    got = dict(
        (r[0], r[1:])
        for r in db.execute(
            "SELECT item_id, mc_nopassage_correct, mc_nopassage_norm_correct, guessable "
            "FROM item_outcomes WHERE method = 'w'"
        ).fetchall()
    )
    # guessable = mc right and right without the passage: i1 (MC-only) and i4 (open right);
    # i3 is wrong in mc, so its pick without the passage explains nothing
    assert got == {
        "i1": (True, True, True),
        "i2": (False, True, False),
        "i3": (False, False, False),
        "i4": (True, False, True),
    }


def test_item_values_nopassage_metrics_by_hand(db):
    # w: no-passage [1,0,0,1] -> 0.5; per byte [1,1,0,0] -> 0.5; chance-adjusted (0.5-0.25)/0.75
    assert _rate(db, "acc_mc_nopassage") == (4, 0.5)
    assert _rate(db, "acc_mc_nopassage_norm") == (4, 0.5)
    assert _rate(db, "acc_mc_nopassage_chance_adj") == (4, 1 / 3)
    # per item mc_only - (1 - open) * nopassage: i1 1 - 1 = 0, i2 1 - 0 = 1, i3 0 - 0 = 0,
    # i4 0 - 0 * 1 = 0 -> 0.25 (the 1/K version beside it: 0.3125)
    assert _rate(db, "mc_only_guess_adj_nopassage") == (4, 0.25)
    assert _rate(db, "mc_only_guess_adj") == (4, 0.3125)
    # dense: open right everywhere, so nothing to adjust; no-passage [1,0,0,1]
    assert _rate(db, "mc_only_guess_adj_nopassage", method="dense") == (4, 0.0)
    assert _rate(db, "acc_mc_nopassage", method="dense") == (4, 0.5)
    # pooled rows (one language) equal the language's
    assert _rate(db, "mc_only_guess_adj_nopassage", lang="all") == (4, 0.25)


def test_accuracy_and_mc_only_nopassage_columns_by_hand(db):
    acc = db.execute(
        "SELECT n_items, accuracy, accuracy_norm, chance, accuracy_chance_adj, ci_low, ci_high "
        "FROM accuracy WHERE method = 'w' AND lang = 'en' AND format = 'mc_nopassage'"
    ).fetchone()
    assert acc[:5] == (4, 0.5, 0.5, 0.25, pytest.approx(1 / 3))
    assert acc[5] <= 0.5 <= acc[6]
    got = db.execute(
        "SELECT mc_only_guess_adj_nopassage, guess_adj_nopassage_ci_low, "
        "guess_adj_nopassage_ci_high, acc_mc_nopassage, mc_nopassage_ci_low, "
        "mc_nopassage_ci_high, n_mc_only_guessable, mc_only_guess_adj "
        "FROM mc_only WHERE method = 'w' AND lang = 'en'"
    ).fetchone()
    assert got[0] == pytest.approx(0.25) and got[1] <= 0.25 <= got[2]
    assert got[3] == pytest.approx(0.5) and got[4] <= 0.5 <= got[5]
    assert got[6] == 1 and got[7] == pytest.approx(0.3125)  # i1 is MC-only and guessable
    summary = db.execute(
        "SELECT mc_nopassage, guess_adj, guess_adj_nopassage FROM report_summary "
        "WHERE method = 'w' AND lang = 'all'"
    ).fetchone()
    assert summary == (0.5, 0.31, 0.25)


def test_without_nopassage_rows_the_columns_are_null(tmp_path):
    con = build(tmp_path, DENSE + PRUNED, {"en": ["i1", "i2", "i3", "i4"]}, POOL)
    assert con.execute(
        "SELECT count(*) FROM item_outcomes WHERE mc_nopassage_correct IS NOT NULL "
        "OR guessable IS NOT NULL"
    ).fetchone() == (0,)
    assert _rate(con, "acc_mc_nopassage") is None
    assert _rate(con, "mc_only_guess_adj_nopassage") is None
    assert con.execute(
        "SELECT count(*) FROM accuracy WHERE format = 'mc_nopassage'"
    ).fetchone() == (0,)
    assert con.execute(
        "SELECT mc_only_guess_adj_nopassage, acc_mc_nopassage, n_mc_only_guessable, "
        "mc_only_guess_adj FROM mc_only WHERE method = 'w' AND lang = 'en'"
    ).fetchone() == (None, None, 0, pytest.approx(0.3125))


# --- the real model ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(bundled_model_dir):
    from benchmark_illusion.models.checkpoints import load_checkpoint

    return load_checkpoint(bundled_model_dir, "float32")


def _sample_items(lang: str, n: int) -> pl.DataFrame:
    from benchmark_illusion.data.items import build_items, validate_rows
    from benchmark_illusion.data.loaders import load_raw

    raw = load_raw(
        {"source": "squad_json", "path": str(ROOT / "resources/sample_qa/{lang}.json")}, lang
    )
    built, _ = build_items(validate_rows(raw, extractive=True)[0], seed=1)
    return built.head(n)


def test_real_model_scores_the_sample_items_without_their_passage(real):
    """The bundled model on real sample items (en, de): a finite no-passage row per item, whose
    prompt holds the question but neither the passage nor (where the question does not hold it)
    the gold; its scores equal a full forward pass on that prompt."""
    model, tok = real
    items = pl.concat([_sample_items("en", 3), _sample_items("de", 2)], how="diagonal_relaxed")
    settings = EvalSettings(formats=("mc", "mc_nopassage"), batch_size=4)
    df = evaluate_items(model, tok, items, settings, RunMeta("real"), progress=False)
    np_rows = {r["item_id"]: r for r in df.filter(pl.col("format") == "mc_nopassage").to_dicts()}
    mc_rows = {r["item_id"]: r for r in df.filter(pl.col("format") == "mc").to_dicts()}
    assert set(np_rows) == set(items["item_id"])
    toks = Tokens(tok, settings.prompt)
    needs_passage = 0
    for item in items.to_dicts():
        r = np_rows[item["item_id"]]
        assert all(math.isfinite(x) for x in r["option_ll"]) and len(r["option_ll"]) == 4
        text = build_prompt(tok, settings.prompt, item, "mc_nopassage")
        assert r["prompt_id"] == prompt_id(text)
        assert item["context"] not in text and item["question"] in text
        assert r["n_prompt_tokens"] < mc_rows[item["item_id"]]["n_prompt_tokens"]
        gold = item["answers"][0]
        if gold not in item["question"]:
            needs_passage += 1
            # the gold is written nowhere in the prompt: only the passage held it
            assert gold in item["context"] and gold not in text
        ids = toks.encode(text)
        k = item["gold_option"]
        cont, start = toks.continuation(text, ids, item["options"][k])
        assert r["option_ll"][k] == pytest.approx(naive_logprob(model, ids[:start], cont), abs=1e-3)
    assert needs_passage >= 3
