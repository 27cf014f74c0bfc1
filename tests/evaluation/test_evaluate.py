"""The evaluation engine on a tiny random model with the real SmolLM2 tokenizer and chat template.

Every number the engine logs is recomputed here the slow, obvious way.
"""

from __future__ import annotations

import math

import polars as pl
import pytest
import torch

from benchmark_illusion.evaluation.decoding import judge_row
from benchmark_illusion.evaluation.evaluate import LOG_SCHEMA, EvalSettings, RunMeta, evaluate_items
from benchmark_illusion.evaluation.prompts import PromptSettings, build_prompt
from conftest import make_tiny_model

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
        item_id="en-2",
        lang="en",
        question="When was the bridge built?",
        context="The Pellan Bridge was built in 1931 from grey stone. It was repaired in 1987.",
        answers=["1931"],
        options=["1987", "42", "1931", "120"],
        gold_option=2,
    ),
    dict(
        item_id="de-1",
        lang="de",
        question="Wie lang ist der See?",
        context="Der Mellensee ist 9 Kilometer lang. Er liegt bei Talbach.",
        answers=["9 Kilometer", "9"],
        options=["Talbach", "12", "Hecht", "9 Kilometer"],
        gold_option=3,
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
        item_id="en-3",
        lang="en",
        question="What colour is the tip of the tail?",
        context="The red fox has a bushy tail with a white tip. Its kits are born in spring.",
        answers=["white"],
        options=["red", "white", "kits", "spring"],
        gold_option=1,
    ),
]


@pytest.fixture(scope="module")
def items():
    return pl.DataFrame(ITEMS)


@pytest.fixture(scope="module")
def tiny(bundled_tokenizer):
    return make_tiny_model(len(bundled_tokenizer), seed=3)


def naive_logprob(model, prefix, cont):
    with torch.no_grad():
        logp = torch.log_softmax(
            model(input_ids=torch.tensor([prefix + cont])).logits[0].double(), -1
        )
    return float(sum(logp[len(prefix) - 1 + j, t] for j, t in enumerate(cont)))


def encode(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("prefix", ["Answer:", "Answer: "])
def test_mc_scores_equal_one_forward_per_option(tiny, bundled_tokenizer, items, prefix):
    """'Answer: ' ends in a space that merges with the option's first word: the boundary path."""
    settings = EvalSettings(
        prompt=PromptSettings(answer_prefix=prefix), formats=("mc",), batch_size=3
    )
    df = evaluate_items(tiny, bundled_tokenizer, items, settings, RunMeta("tiny"), progress=False)
    sep = " " if prefix == "Answer:" else ""
    merged = []
    for row in df.iter_rows(named=True):
        item = next(i for i in ITEMS if i["item_id"] == row["item_id"])
        prompt = build_prompt(bundled_tokenizer, settings.prompt, item, "mc")
        p_ids = encode(bundled_tokenizer, prompt)
        for k, opt in enumerate(item["options"]):
            joint = encode(bundled_tokenizer, prompt + sep + opt)
            start = next(
                (i for i, (a, b) in enumerate(zip(joint, p_ids, strict=False)) if a != b),
                len(p_ids),
            )
            want = naive_logprob(tiny, joint[:start], joint[start:])
            assert row["option_ll"][k] == pytest.approx(want, abs=1e-4), (row["item_id"], k)
            assert row["option_ll_per_byte"][k] == pytest.approx(want / len(opt.encode()), abs=1e-4)
            # acc_norm as lm-evaluation-harness: per character of the option
            assert row["option_ll_per_char"][k] == pytest.approx(want / len(opt), abs=1e-4)
        assert row["pred_option"] == max(range(4), key=lambda k: row["option_ll"][k])
        assert row["correct"] == (row["pred_option"] == item["gold_option"])
        assert row["pred_option_norm"] == max(range(4), key=lambda k: row["option_ll_per_char"][k])
        assert row["pred_option_bytes"] == max(range(4), key=lambda k: row["option_ll_per_byte"][k])
        assert row["correct_bytes"] == (row["pred_option_bytes"] == item["gold_option"])
        merged.append(row["boundary_merge"])
    assert any(merged) == (prefix == "Answer: ")


def _reference_gold(tok, model, prompt, answers):
    """Per gold, the slow way: skip leading whitespace-only tokens, rank the next one by a full
    forward pass."""
    p_ids = encode(tok, prompt)
    out = []
    for a in answers:
        cont = encode(tok, prompt + " " + a)[len(p_ids) :]
        k = next(j for j, t in enumerate(cont) if tok.decode([t]).strip())
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p_ids + cont[:k]])).logits[0, -1]
        order = torch.argsort(logits, descending=True).tolist()
        out.append(
            dict(
                rank=order.index(cont[k]) + 1,
                offset=k,
                token=cont[k],
                logprob=float(torch.log_softmax(logits, -1)[cont[k]]),
                answer=naive_logprob(model, p_ids, cont),
                n_bytes=len(a.encode()),
            )
        )
    return out


NUMERIC_ITEMS = [
    dict(
        item_id="n-1",
        lang="en",
        question="When did it open?",
        context="It opened in 1427 after a long war.",
        answers=["1427"],
        options=["1427", "1500", "1600", "1700"],
        gold_option=0,
    ),
    dict(
        item_id="n-2",
        lang="en",
        question="How many came?",
        context="About 12,000 people came.",
        answers=["12,000", "about 12,000"],
        options=["12,000", "200", "3", "44"],
        gold_option=0,
    ),
    dict(
        item_id="n-3",
        lang="bn",
        question="কবে?",
        context="বাংলাদেশ ১৯৭১ সালে স্বাধীন হয়।",
        answers=["১৯৭১"],
        options=["১৯৭১", "১৯৫২", "১৯৪৭", "১৯৯০"],
        gold_option=0,
    ),
]


def test_gold_rank_ranks_the_first_visible_token_by_argsort_of_the_logits(
    tiny, bundled_tokenizer, items
):
    """Leading whitespace tokens (' ' before digits, before Bengali bytes) are teacher-forced, then
    ranked."""
    all_items = pl.concat([items, pl.DataFrame(NUMERIC_ITEMS)])
    settings = EvalSettings(formats=("open",), batch_size=4, max_new_tokens=4)
    df = evaluate_items(
        tiny, bundled_tokenizer, all_items, settings, RunMeta("tiny"), progress=False
    )
    offsets = []
    for row in df.iter_rows(named=True):
        item = next(i for i in ITEMS + NUMERIC_ITEMS if i["item_id"] == row["item_id"])
        prompt = build_prompt(bundled_tokenizer, settings.prompt, item, "open")
        ref = _reference_gold(bundled_tokenizer, tiny, prompt, item["answers"])
        best = min(range(len(ref)), key=lambda j: ref[j]["rank"])
        assert row["gold_rank"] == ref[best]["rank"], row["item_id"]
        assert row["gold_token_offset"] == ref[best]["offset"]
        assert row["gold_token"] == bundled_tokenizer.decode([ref[best]["token"]])
        assert row["gold_token"].strip()
        assert row["gold_logprob"] == pytest.approx(ref[best]["logprob"], abs=1e-4)
        whole = max(ref, key=lambda r: r["answer"])
        assert row["gold_logprob_answer"] == pytest.approx(whole["answer"], abs=1e-3)
        assert row["gold_logprob_answer_per_byte"] == pytest.approx(
            whole["answer"] / whole["n_bytes"], abs=1e-3
        )
        offsets.append(row["gold_token_offset"])
    assert max(offsets) >= 1  # the digit and Bengali golds start with a bare space


def test_whole_gold_logprob_equals_the_mc_score_of_the_gold_option(tiny, bundled_tokenizer):
    one_gold = pl.DataFrame([i for i in ITEMS + NUMERIC_ITEMS if len(i["answers"]) == 1])
    df = evaluate_items(
        tiny,
        bundled_tokenizer,
        one_gold,
        EvalSettings(formats=("open", "mc"), max_new_tokens=2),
        RunMeta("tiny"),
        progress=False,
    )
    open_ = {r["item_id"]: r for r in df.filter(pl.col("format") == "open").iter_rows(named=True)}
    for r in df.filter(pl.col("format") == "mc").iter_rows(named=True):
        item = next(i for i in ITEMS + NUMERIC_ITEMS if i["item_id"] == r["item_id"])
        if item["options"][item["gold_option"]] == item["answers"][0]:
            assert open_[r["item_id"]]["gold_logprob_answer"] == pytest.approx(
                r["option_ll"][item["gold_option"]], abs=1e-4
            )


@pytest.mark.parametrize(
    "gold, visible, partial",
    [
        ("1427", "1", False),
        ("12,000", "1", False),
        ("Paris", " Paris", False),
        ("the Portuguese", " the", False),
        ("北京", None, True),
        ("১৯৭১", None, True),
        ("Αθήνα", None, None),
        ("กรุงเทพ", None, None),
        ("दिल्ली", None, None),
        ("القاهرة", None, None),
    ],
)
def test_ranked_gold_token_is_never_whitespace_on_the_real_tokenizer(
    bundled_tokenizer, gold, visible, partial
):
    """Golds in six scripts under the real open prompt: the ranked token carries text; byte pieces
    are flagged."""
    from benchmark_illusion.evaluation.decoding import Tokens
    from benchmark_illusion.evaluation.engine import ContinuationScores
    from benchmark_illusion.evaluation.evaluate import _gold_continuations, _gold_rank

    toks = Tokens(bundled_tokenizer, PromptSettings())
    item = dict(ITEMS[0], answers=[gold])
    text = build_prompt(bundled_tokenizer, PromptSettings(), item, "open")
    ids = toks.encode(text)
    golds = _gold_continuations(toks, text, ids, [gold])
    cont = golds[0][1]
    fake = [ContinuationScores([-1.0] * len(cont), list(range(1, len(cont) + 1)))]
    got = _gold_rank(toks, golds, fake)
    assert got["gold_token"].strip(), (gold, got)
    assert all(not bundled_tokenizer.decode([t]).strip() for t in cont[: got["gold_token_offset"]])
    assert got["gold_rank"] == got["gold_token_offset"] + 1  # the fake rank of position k is k + 1
    if visible is not None:
        assert got["gold_token"] == visible
    if partial is not None:
        assert got["gold_token_partial"] is partial
    assert got["gold_token_partial"] == ("\ufffd" in got["gold_token"])


def test_batching_does_not_change_results(tiny, bundled_tokenizer, items):
    runs = [
        evaluate_items(
            tiny,
            bundled_tokenizer,
            items,
            EvalSettings(batch_size=bs, max_new_tokens=6),
            RunMeta("tiny"),
            progress=False,
        )
        for bs in (1, 5)
    ]
    a, b = runs
    assert a["output"].to_list() == b["output"].to_list()
    assert a["gold_rank"].to_list() == b["gold_rank"].to_list()
    for x, y in zip(a["option_ll"].to_list(), b["option_ll"].to_list(), strict=True):
        assert (x is None and y is None) or max(
            abs(p - q) for p, q in zip(x, y, strict=True)
        ) < 1e-4


def test_token_caps_bound_batches_and_decode_groups_without_changing_results(
    tiny, bundled_tokenizer, items, monkeypatch
):
    """batch_tokens and decode_tokens only cut batches and decode groups: the same rows."""
    from benchmark_illusion.evaluation import generation

    stacked = []
    real_stack = generation.stack

    def stack(states, room=0):
        out = real_stack(states, room=room)
        stacked.append((out.mask.shape[0], out.mask.shape[1], room))
        return out

    monkeypatch.setattr(generation, "stack", stack)

    def run(**caps):
        stacked.clear()
        rows = evaluate_items(
            tiny,
            bundled_tokenizer,
            items,
            EvalSettings(batch_size=8, decode_rows=16, max_new_tokens=6, **caps),
            RunMeta("tiny"),
            progress=False,
        )
        return rows, list(stacked)

    free, free_groups = run(batch_tokens=10**6, decode_tokens=10**6)
    longest = max(w for _, w, _ in free_groups)
    capped, groups = run(batch_tokens=longest, decode_tokens=2 * (longest + 8))
    # every decode group within the cap, unless it is a single prefill batch of one row
    assert len(groups) > len(free_groups)
    assert all(n * (w + room) <= 2 * (longest + 8) or n == 1 for n, w, room in groups)
    assert capped["output"].to_list() == free["output"].to_list()
    assert capped["gold_rank"].to_list() == free["gold_rank"].to_list()
    for x, y in zip(capped["option_ll"].to_list(), free["option_ll"].to_list(), strict=True):
        assert (x is None and y is None) or max(
            abs(p - q) for p, q in zip(x, y, strict=True)
        ) < 1e-4


def test_rows_follow_the_log_schema(tiny, bundled_tokenizer, items):
    meta = RunMeta(
        "tiny",
        method="wanda",
        structure="2:4",
        sparsity=0.5,
        dataset="d",
        lang="en",
        model_hash="m",
        config_hash="c",
    )
    df = evaluate_items(
        tiny,
        bundled_tokenizer,
        items,
        EvalSettings(max_new_tokens=3, seed=11),
        meta,
        progress=False,
    )
    assert dict(df.schema) == LOG_SCHEMA
    assert df.height == 4 * len(ITEMS)  # open, candidates, mc, mc_nopassage
    assert df.group_by("item_id").len()["len"].to_list() == [4] * len(ITEMS)
    assert (
        set(df["sparsity"]) == {0.5} and set(df["seed"]) == {11} and set(df["structure"]) == {"2:4"}
    )
    assert df.filter(pl.col("format") == "open")["gold_rank"].null_count() == 0
    assert df.filter(pl.col("format") == "mc")["option_ll"].null_count() == 0
    gen = df.filter(~pl.col("format").is_in(["mc", "mc_nopassage"]))
    # the budget of 3 is raised to each item's longest gold + budget_margin; nobody writes past it
    assert (gen["max_new_tokens"] > 3).all() and (
        gen["n_output_tokens"] <= gen["max_new_tokens"]
    ).all()


def test_prompts_end_with_the_answer_prefix_in_both_template_modes(bundled_tokenizer):
    item = ITEMS[0]
    chat = build_prompt(bundled_tokenizer, PromptSettings(), item, "open")
    assert chat.startswith("<|im_start|>") and chat.endswith("<|im_start|>assistant\nAnswer:")
    plain = build_prompt(
        bundled_tokenizer,
        PromptSettings(chat_template=False, candidates_style="letters"),
        item,
        "candidates",
    )
    assert "<|im_start|>" not in plain and plain.endswith("\n\nAnswer:")
    assert "B. Port Alder" in plain
    one = build_prompt(bundled_tokenizer, PromptSettings(), item, "oneshot", exemplar=ITEMS[1])
    assert one.count("Answer:") == 2 and "Answer: 1931" in one and one.endswith("Answer:")


LETTERS_STYLE = EvalSettings(prompt=PromptSettings(candidates_style="letters"))


@pytest.mark.parametrize(
    "output, pred_option, answer_norm, correct",
    [
        (" C. Talbach", 2, "talbach", False),  # the label's text is judged: not the label's option
        ("C", 2, "1742", True),  # a bare label stands for its option
        ("(B)", 1, "london", False),
        ("D. Berlin\nmore", 3, "berlin", False),
        ("1742", 2, "1742", True),  # text matching an option
        ("Somewhere else", None, "somewhere else", False),
        ("An answer", None, "answer", False),  # an article is not a label
        ("Paris, 1742", None, "paris 1742", False),  # two options named
    ],
)
def test_candidates_rows_are_judged_by_judge_candidates(output, pred_option, answer_norm, correct):
    item = dict(
        ITEMS[1], options=["Paris", "London", "1742", "Berlin"], gold_option=2, answers=["1742"]
    )
    row = judge_row(output, item, LETTERS_STYLE, "candidates")
    assert (row["pred_option"], row["answer_norm"], row["correct"]) == (
        pred_option,
        answer_norm,
        correct,
    )
    assert row["options_named"] == (
        2 if pred_option is None and "," in output else int(pred_option is not None)
    )


def test_candidates_bullets_style_ignores_letters():
    item = dict(
        ITEMS[1], options=["Paris", "London", "1742", "Berlin"], gold_option=2, answers=["1742"]
    )
    bullets = EvalSettings(prompt=PromptSettings(candidates_style="bullets"))
    assert judge_row("C", item, LETTERS_STYLE, "candidates")["correct"]
    row = judge_row("C", item, bullets, "candidates")
    assert not row["correct"] and row["pred_option"] is None and row["options_named"] == 0
    assert judge_row("1742", item, bullets, "candidates")["correct"]


def test_open_rows_log_hedge_repeat_and_options_named():
    item = ITEMS[1]  # options 1987, 42, 1931 (gold), 120
    row = judge_row("1931 or 1987", item, EvalSettings())
    assert row["contains"] and row["hedge"] and not row["correct"] and row["options_named"] == 2
    assert "pred_option" not in row
    row = judge_row("1931 1931 1931", item, EvalSettings())
    assert row["repeat"] and not row["correct"] and row["options_named"] == 1
    row = judge_row("It was built in 1931.", item, EvalSettings())
    assert row["correct"] and not row["hedge"] and not row["repeat"]


QWEN3_STYLE_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def test_a_thinking_template_gets_enable_thinking_false_unless_the_config_sets_it(
    bundled_tokenizer,
):
    import copy

    tok = copy.deepcopy(bundled_tokenizer)
    tok.chat_template = QWEN3_STYLE_TEMPLATE
    item = ITEMS[0]
    default = build_prompt(tok, PromptSettings(), item, "open")
    assert default.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer:")
    thinking = build_prompt(
        tok, PromptSettings(template_kwargs={"enable_thinking": True}), item, "open"
    )
    assert thinking.endswith("<|im_start|>assistant\nAnswer:")
    # every format and the one-shot turns go through the same kwargs
    shot = build_prompt(tok, PromptSettings(), item, "oneshot", exemplar=ITEMS[2])
    assert shot.endswith("<think>\n\n</think>\n\nAnswer:")
    # the bundled template does not read enable_thinking: nothing is added, the prompt is unchanged
    assert PromptSettings().chat_template_kwargs(bundled_tokenizer) == {}
    assert "<think>" not in build_prompt(bundled_tokenizer, PromptSettings(), item, "open")
    # other template kwargs reach the template
    tok.chat_template = "{{- greeting }}{{- messages[-1].content }}"
    assert build_prompt(
        tok, PromptSettings(template_kwargs={"greeting": "Hi! "}), item, "open"
    ).startswith("Hi! ")


@pytest.mark.parametrize("style", ["letters", "bullets"])
def test_candidates_prompt_lists_every_option_in_its_style(bundled_tokenizer, style):
    item = ITEMS[1]
    text = build_prompt(
        bundled_tokenizer, PromptSettings(candidates_style=style), item, "candidates"
    )
    lines = text.split("Options:\n")[1].split("<|im_end|>")[0].split("\n")
    if style == "letters":
        assert lines == [f"{'ABCD'[k]}. {o}" for k, o in enumerate(item["options"])]
    else:
        assert lines == [f"- {o}" for o in item["options"]]
        assert "A. " not in text
    with pytest.raises(ValueError, match="candidates_style"):
        PromptSettings(candidates_style="numbers")


BF16_LL_TOLERANCE = 1.0  # nats: bfloat16 keeps ~3 significant digits of each activation


def test_bfloat16_on_cpu_batch_1_and_6_agree_within_a_stated_tolerance(bundled_model_dir):
    """The real model in bfloat16 on the CPU, 6 sample items evaluated one at a time and in one
    batch, greedy answers of up to 12 tokens (bfloat16 matrix products are slow on a CPU):
    option log-likelihoods agree within BF16_LL_TOLERANCE; the decisions that differ (MC pick,
    greedy answer, gold rank) are counted and printed, not hidden. In float32 batching changes
    no decision (test_batching_does_not_change_results)."""
    from benchmark_illusion.data.items import build_items, validate_rows
    from benchmark_illusion.data.loaders import load_raw
    from benchmark_illusion.evaluation.recovery import RecoverySettings
    from benchmark_illusion.models.checkpoints import load_checkpoint
    from conftest import ROOT

    model, tok = load_checkpoint(bundled_model_dir, "bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    raw = load_raw(
        {"source": "squad_json", "path": str(ROOT / "resources/sample_qa/{lang}.json")}, "en"
    )
    built, _ = build_items(validate_rows(raw, extractive=True)[0], seed=1)
    sample = built.head(6)
    logs = {}
    for batch in (1, 6):
        s = EvalSettings(
            formats=("open", "mc"),
            batch_size=batch,
            max_new_tokens=12,
            recovery=RecoverySettings.only(),
        )
        logs[batch] = evaluate_items(model, tok, sample, s, RunMeta("bf16"), progress=False)
        logs[batch] = logs[batch].sort(["item_id", "format"])
    one, eight = logs[1], logs[6]
    mc1, mc8 = (x.filter(pl.col("format") == "mc") for x in (one, eight))
    op1, op8 = (x.filter(pl.col("format") == "open") for x in (one, eight))
    assert mc1["item_id"].to_list() == mc8["item_id"].to_list() and mc1.height == 6
    worst = max(
        abs(a - b)
        for u, v in zip(mc1["option_ll"], mc8["option_ll"], strict=True)
        for a, b in zip(u, v, strict=True)
    )
    assert worst < BF16_LL_TOLERANCE
    counts = dict(
        mc_pick=int((mc1["pred_option"] != mc8["pred_option"]).sum()),
        greedy_answer=int((op1["output"] != op8["output"]).sum()),
        gold_rank=int((op1["gold_rank"] != op8["gold_rank"]).fill_null(False).sum()),
    )
    print(f"bfloat16, batch 1 vs 6, 6 items: max |d option_ll| {worst:.3f}; differ: {counts}")


# nats: float16 keeps 11 significant bits (~3.3 decimal digits) of each activation, bfloat16 8
FP16_LL_TOLERANCE = 0.5


def test_float16_on_cpu_agrees_with_float32_within_a_stated_tolerance(bundled_model_dir):
    """evaluation.dtype float16 on the CPU (torch runs float16 matrix products there, about 5x
    slower than float32 on 2 cores): the real model on 3 sample items, open (up to 8 new tokens)
    and mc in one batch, against the same items in float32. Every option log-likelihood is finite
    (no float16 overflow in the activations) and within FP16_LL_TOLERANCE of float32; the
    decisions that differ (MC pick, greedy answer, gold rank) are counted and printed, not
    hidden."""
    from benchmark_illusion.data.items import build_items, validate_rows
    from benchmark_illusion.data.loaders import load_raw
    from benchmark_illusion.evaluation.recovery import RecoverySettings
    from benchmark_illusion.models.checkpoints import load_checkpoint
    from conftest import ROOT

    raw = load_raw(
        {"source": "squad_json", "path": str(ROOT / "resources/sample_qa/{lang}.json")}, "en"
    )
    built, _ = build_items(validate_rows(raw, extractive=True)[0], seed=1)
    sample = built.head(3)
    s = EvalSettings(
        formats=("open", "mc"), batch_size=3, max_new_tokens=8, recovery=RecoverySettings.only()
    )
    logs = {}
    for dtype in ("float16", "float32"):
        model, tok = load_checkpoint(bundled_model_dir, dtype)
        assert next(model.parameters()).dtype == getattr(torch, dtype)
        logs[dtype] = evaluate_items(model, tok, sample, s, RunMeta(dtype), progress=False).sort(
            ["item_id", "format"]
        )
    half, full = logs["float16"], logs["float32"]
    mc16, mc32 = (x.filter(pl.col("format") == "mc") for x in (half, full))
    op16, op32 = (x.filter(pl.col("format") == "open") for x in (half, full))
    assert mc16["item_id"].to_list() == mc32["item_id"].to_list() and mc16.height == 3
    diffs = [
        abs(a - b)
        for u, v in zip(mc16["option_ll"], mc32["option_ll"], strict=True)
        for a, b in zip(u, v, strict=True)
    ]
    assert all(math.isfinite(d) for d in diffs), mc16["option_ll"].to_list()
    assert max(diffs) < FP16_LL_TOLERANCE
    counts = dict(
        mc_pick=int((mc16["pred_option"] != mc32["pred_option"]).sum()),
        greedy_answer=int((op16["output"] != op32["output"]).sum()),
        gold_rank=int((op16["gold_rank"] != op32["gold_rank"]).fill_null(False).sum()),
    )
    print(f"float16 vs float32, 3 items: max |d option_ll| {max(diffs):.3f}; differ: {counts}")


def test_acc_norm_is_per_character_and_acc_bytes_per_byte():
    """Where an option's bytes and characters disagree (a CJK name against Latin digits), the two
    normalisations can pick different options; lm-evaluation-harness calls the per-character one
    acc_norm and the per-byte one acc_bytes."""
    from benchmark_illusion.evaluation.evaluate import _mc_rows

    class Score:
        def __init__(self, total):
            self.total = total

    item = {
        "item_id": "x",
        "lang": "zh",
        "options": ["北京市", "1427", "上海", "abc"],  # 3 chars / 9 bytes, 4 / 4, 2 / 6, 3 / 3
        "gold_option": 0,
    }
    ll = [-6.0, -6.0, -5.0, -7.0]
    rows = _mc_rows(
        None, [item], [0], ["p"], [[1, 2]], [[(None, None)] * 4], [[Score(x) for x in ll]], {}
    )
    (r,) = rows
    # per char: -2.0, -1.5, -2.5, -2.33 -> option 1; per byte: -0.67, -1.5, -0.83, -2.33 -> 0
    assert r["option_ll_per_char"] == pytest.approx([-2.0, -1.5, -2.5, -7 / 3])
    assert r["pred_option_norm"] == 1 and not r["correct_norm"]
    assert r["pred_option_bytes"] == 0 and r["correct_bytes"]
    assert r["pred_option"] == 2


def test_the_judges_length_limits_reach_its_verdicts(tiny, bundled_tokenizer, items):
    """judge.max_length_factor and max_length_slack (EvalSettings) decide `too_long` in the rows:
    with limits no answer reaches, none is too long; with a limit of zero tokens every non-empty
    answer is (a judge left at its defaults, 3x the gold + 3, would pass some of them)."""
    from benchmark_illusion.evaluation.recovery import RecoverySettings

    def rows(factor: float, slack: int) -> pl.DataFrame:
        s = EvalSettings(
            formats=("open",),
            max_new_tokens=12,
            max_length_factor=factor,
            max_length_slack=slack,
            recovery=RecoverySettings.only(),
        )
        return evaluate_items(tiny, bundled_tokenizer, items, s, RunMeta("tiny"), progress=False)

    loose, strict = rows(1000.0, 1000), rows(0.0, 0)
    assert not loose["too_long"].any()
    spoken = strict.filter(pl.col("output").str.strip_chars() != "")
    assert spoken.height > 0 and spoken["too_long"].all()
    assert not strict["correct"].any()
    default = rows(3.0, 3).filter(pl.col("output").str.strip_chars() != "")
    assert not default["too_long"].all()


def test_the_system_prompt_reaches_the_rendered_prompt_and_its_tokens(bundled_tokenizer):
    """prompt.system_prompt replaces the chat template's default system turn: the configured text
    is in the prompt the model reads, where SmolLM2's own default is not, and without it the
    template's default comes back."""
    from benchmark_illusion.evaluation.prompts import render
    from benchmark_illusion.evaluation.settings import EvalSettings

    mine = "Reply with the answer only, in the passage's words."
    params = {
        "seed": 1,
        "prompt": {
            "answer_prefix": "Answer:",
            "chat_template": "auto",
            "system_prompt": mine,
            "candidates_style": "bullets",
            "template_kwargs": {},
        },
        "evaluation": {
            "formats": ["open", "mc"],
            "batch_size": 8,
            "max_new_tokens": 8,
            "budget_margin": 4,
            "recovery": {},
        },
        "judge": {"max_length_factor": 3.0, "max_length_slack": 3, "sentence_slack": 4},
    }
    with_it = render(bundled_tokenizer, EvalSettings.from_params(params).prompt, [], "Question?")
    params["prompt"]["system_prompt"] = None
    without = render(bundled_tokenizer, EvalSettings.from_params(params).prompt, [], "Question?")
    assert mine in with_it and mine not in without
    default = without.split("<|im_start|>user")[0]  # the template's own system turn
    assert default.strip() and default not in with_it
    ids = bundled_tokenizer(with_it, add_special_tokens=False)["input_ids"]
    assert bundled_tokenizer.decode(ids) == with_it
