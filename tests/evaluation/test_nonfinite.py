"""A NaN or infinite logit or log-probability fails the evaluation loudly, naming the checkpoint,
the step and the items, and writes nothing.

Left unchecked, one NaN weight makes every option score NaN: the argmax picks option A, every gold
ranks first and every open answer is empty, so the items would look MC-only at rank 1.
"""

from __future__ import annotations

import polars as pl
import pytest
import torch

from benchmark_illusion.config import params as rule_params
from benchmark_illusion.evaluation import engine, generation, steps
from benchmark_illusion.evaluation.decoding import RowContext, Tokens, stop_rule
from benchmark_illusion.evaluation.evaluate import EvalSettings, RunMeta, evaluate_items
from benchmark_illusion.evaluation.prompts import PromptSettings
from benchmark_illusion.evaluation.recovery import RecoverySettings, recovery_rows
from benchmark_illusion.evaluation.steps import EvalJob, evaluate_file
from benchmark_illusion.models.keys import CheckpointKey, Placement
from conftest import make_tiny_model
from evaluation.test_evaluate import ITEMS
from evaluation.test_recovery import EXEMPLAR, ITEMS_EX
from test_pipeline_steps import Strict, config, item_file, tiny_dir  # noqa: F401 (fixtures)

IDS = [i["item_id"] for i in ITEMS]
META = RunMeta("tiny", "magnitude", "2:4", 0.5, dataset="sample", lang="en")
PAD = 0


@pytest.fixture
def tiny(bundled_tokenizer):
    return make_tiny_model(len(bundled_tokenizer), seed=3)


def poison(model, value: float, layer: int = 0) -> None:
    """One weight of one Linear (a query projection) set to `value`."""
    with torch.no_grad():
        model.model.layers[layer].self_attn.q_proj.weight[0, 0] = value


class BadLogits:
    """A forward hook that sets `rows` of the logits to NaN in the forwards `when` picks
    (its arguments: input_ids, the attention mask)."""

    def __init__(self, model, when, rows=None):
        self.when, self.rows = when, rows
        self.handle = model.register_forward_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs, out):
        ids, mask = kwargs["input_ids"], kwargs.get("attention_mask")
        if self.when(ids, mask):
            out.logits[slice(None) if self.rows is None else self.rows] = float("nan")
        return out


def decode_step(ids, mask):
    return ids.shape[1] == 1


def scoring(ids, mask):
    return mask is not None and mask.dim() == 4


def unbatched(ids, mask):
    """A forward of one sequence without a mask: a boundary-merged option (or a shared head)."""
    return mask is None and ids.shape[1] > 1


def evaluate(model, tok, formats=("open", "mc"), **kw):
    settings = EvalSettings(formats=formats, batch_size=3, max_new_tokens=4, **kw)
    return evaluate_items(model, tok, pl.DataFrame(ITEMS), settings, META, progress=False)


# ---------------------------------------------------------------- a bad weight


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_nan_or_inf_weight_fails_at_the_prefill_naming_checkpoint_step_and_items(
    tiny, bundled_tokenizer, value
):
    poison(tiny, value)
    with pytest.raises(engine.NonFiniteError) as info:
        evaluate(tiny, bundled_tokenizer)
    err, msg = info.value, str(info.value)
    assert isinstance(err, ValueError)
    assert err.step == "prefill" and err.fmt == "open+mc"
    assert "prefill (open+mc)" in msg
    assert "model=tiny method=magnitude structure=2:4 sparsity=0.5" in msg and "float32" in msg
    # the first prefill batch: three length-sorted items, every one of them bad
    assert len(err.items) == 3 and set(err.items) <= set(IDS)
    assert f"items {', '.join(err.items)}." in msg
    assert "No log row is written" in msg


@pytest.mark.parametrize("fmt, named", [("candidates", "candidates"), ("mc", "open+mc")])
def test_every_format_checks_its_prefill(tiny, bundled_tokenizer, fmt, named):
    poison(tiny, float("nan"), layer=1)
    with pytest.raises(engine.NonFiniteError) as info:
        evaluate(tiny, bundled_tokenizer, formats=(fmt,))
    assert f"prefill ({named})" in str(info.value)


def test_a_bfloat16_model_is_told_to_evaluate_in_float32(tiny, bundled_tokenizer):
    poison(tiny, float("inf"))
    with pytest.raises(engine.NonFiniteError, match="bfloat16 can overflow.*evaluate in float32"):
        evaluate(tiny.to(torch.bfloat16), bundled_tokenizer, formats=("mc",))


# ---------------------------------------------------------------- each later step


def test_nan_scores_fail_the_mc_scoring(tiny, bundled_tokenizer):
    BadLogits(tiny, scoring)
    with pytest.raises(engine.NonFiniteError, match=r"scoring of options and golds \(open\+mc\)"):
        evaluate(tiny, bundled_tokenizer, formats=("mc",))


def test_a_nan_boundary_merged_option_fails_its_item_alone(tiny, bundled_tokenizer):
    """'Answer: ' ends in a space that merges with the options' first words: those options are
    scored by a forward of their own."""
    BadLogits(tiny, unbatched)
    with pytest.raises(engine.NonFiniteError) as info:
        evaluate(tiny, bundled_tokenizer, formats=("mc",), prompt=PromptSettings("Answer: "))
    err = info.value
    assert err.step == "scoring of a boundary-merged option" and err.fmt == "mc"
    assert len(err.items) == 1 and f"items {err.items[0]}." in str(err)


def test_nan_decode_logits_fail_the_greedy_decode_of_the_named_rows(tiny, bundled_tokenizer):
    BadLogits(tiny, decode_step, rows=[1])
    with pytest.raises(engine.NonFiniteError) as info:
        evaluate(tiny, bundled_tokenizer, formats=("open",))
    err = info.value
    assert err.step == "greedy decode" and err.fmt == "open"
    # the decode group stacks both prefill batches: one of its rows is bad, its item named alone
    assert len(err.rows) == 1 and sorted(err.items) == sorted(IDS)
    assert f"items {err.items[err.rows[0]]} (of the batch " in str(err)


def test_the_recovery_decodes_check_their_prefill_and_every_step(tiny, bundled_tokenizer):
    toks = Tokens(bundled_tokenizer, EvalSettings().prompt)
    stop = stop_rule(tiny, bundled_tokenizer)
    base = dict(model="tiny", dataset="sample", lang="en", seed=0)

    def run(*decodes, **rec):
        settings = EvalSettings(
            batch_size=3, max_new_tokens=4, recovery=RecoverySettings.only(*decodes, **rec)
        )
        exemplars = {"ex-1": EXEMPLAR}
        ctx = RowContext(toks, settings, base)
        recovery_rows(tiny, ctx, ITEMS_EX, stop=stop, exemplars=exemplars, progress=False)

    hook = BadLogits(tiny, decode_step, rows=[4])
    with pytest.raises(engine.NonFiniteError) as info:
        run("beam", num_beams=2)
    assert "beam search (recovery beam)" in str(info.value)
    assert info.value.rows == [2]  # beams 2b and 2b+1 are row b's
    with pytest.raises(engine.NonFiniteError) as info:
        run("sample", num_samples=2)
    assert "sampling (recovery sample)" in str(info.value) and len(info.value.rows) == 1
    hook.handle.remove()
    poison(tiny, float("nan"))
    with pytest.raises(engine.NonFiniteError, match=r"prefill \(recovery beam\+sample\)"):
        run("beam", "sample")
    with pytest.raises(engine.NonFiniteError, match=r"prefill \(oneshot\)"):
        run("oneshot")


def test_check_finite_names_the_rows_of_the_batch():
    engine.check_finite(torch.full((2, 3), 3e38), "step")  # a sum that overflows: all finite
    x = torch.zeros(6, 5)
    engine.check_finite(x, "step")
    x[3, 1] = float("-inf")
    with pytest.raises(engine.NonFiniteError) as info:
        engine.check_finite(x, "step")
    assert info.value.rows == [3] and "step; batch rows [3]" in str(info.value)
    with pytest.raises(engine.NonFiniteError) as info:
        engine.check_finite(x, "step", rows=torch.tensor([0, 2, 4, 6, 8, 10]), group=2)
    assert info.value.rows == [3]


# ---------------------------------------------------------------- nothing is written


@pytest.mark.parametrize("pool", [False, True])
def test_evaluate_file_writes_nothing_and_keeps_an_older_output(
    config,  # noqa: F811
    tiny_dir,  # noqa: F811
    item_file,  # noqa: F811
    tmp_path,
    monkeypatch,
    pool,
):
    """The pool's evaluation (the dense model on the pool) and a checkpoint's alike."""
    load = steps.load_checkpoint

    def poisoned(*args, **kwargs):
        net, tok = load(*args, **kwargs)
        poison(net, float("nan"))
        return net, tok

    monkeypatch.setattr(steps, "load_checkpoint", poisoned)
    params = rule_params.pool_evaluation(config) if pool else rule_params.evaluation(config)
    kw = dict(limit=6) if pool else dict(exemplars=item_file)
    out = tmp_path / "eval.parquet"

    def run():
        evaluate_file(
            EvalJob(
                tiny_dir,
                item_file,
                out,
                CheckpointKey("tiny", "wanda", "2of4", 0.5),
                dataset="sample",
                lang="en",
                **kw,
            ),
            Strict(params),
            Placement(device="cpu"),
        )

    with pytest.raises(engine.NonFiniteError) as info:
        run()
    msg = str(info.value)
    assert "prefill (open+mc)" in msg and "method=wanda structure=2:4 sparsity=0.5" in msg
    assert f"read from {tiny_dir}" in msg
    assert not list(tmp_path.iterdir())  # no output, no temporary
    out.write_bytes(b"an older log")
    with pytest.raises(engine.NonFiniteError):
        run()
    assert out.read_bytes() == b"an older log"
    assert [p.name for p in tmp_path.iterdir()] == ["eval.parquet"]


def test_the_real_model_with_one_nan_weight_fails_before_writing(
    bundled_model_dir,
    config,  # noqa: F811
    item_file,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """SmolLM2-135M with one NaN in one MLP weight: the evaluate step fails at its first
    prefill, and no log is written."""
    load = steps.load_checkpoint

    def poisoned(*args, **kwargs):
        net, tok = load(*args, **kwargs)
        with torch.no_grad():
            net.model.layers[20].mlp.down_proj.weight[7, 100] = float("nan")
        return net, tok

    monkeypatch.setattr(steps, "load_checkpoint", poisoned)
    out = tmp_path / "eval.parquet"
    with pytest.raises(engine.NonFiniteError) as info:
        evaluate_file(
            EvalJob(
                bundled_model_dir,
                item_file,
                out,
                CheckpointKey(model="smollm2-135m"),
                dataset="sample",
                lang="en",
                limit=6,
            ),
            Strict(rule_params.pool_evaluation(config)),
            Placement(device="cpu"),
        )
    err = info.value
    assert err.step == "prefill" and err.fmt == "open+mc" and err.items
    assert "model=smollm2-135m method=dense structure=none sparsity=0" in str(err)
    assert not list(tmp_path.iterdir())


def test_a_finite_model_gives_the_same_rows_with_the_checks(tiny, bundled_tokenizer, monkeypatch):
    """The checks only read: with them disabled, the rows are the same."""
    rec = RecoverySettings.only(
        "beam", "sample", num_beams=2, num_samples=2, max_new_tokens=4, scope="all"
    )
    settings = dict(formats=("open", "mc", "candidates"), recovery=rec)
    with_checks = evaluate(tiny, bundled_tokenizer, **settings)
    monkeypatch.setattr(engine, "check_finite", lambda *a, **k: None)
    monkeypatch.setattr(generation, "check_finite", lambda *a, **k: None)
    without = evaluate(tiny, bundled_tokenizer, **settings)
    assert with_checks.drop("seconds").equals(without.drop("seconds"))
