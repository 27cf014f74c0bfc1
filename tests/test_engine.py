"""The batched primitives equal naive one-sequence computations on a tiny real-architecture
model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from benchmark_illusion import engine
from conftest import make_tiny_model

PAD = 2


def naive_logprob(model, prefix, cont):
    ids = torch.tensor([prefix + cont])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)
    return float(sum(logp[len(prefix) - 1 + j, t] for j, t in enumerate(cont)))


def naive_greedy(model, prefix, n):
    ids = list(prefix)
    out = []
    with torch.no_grad():
        for _ in range(n):
            t = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            out.append(t)
            ids.append(t)
    return out


def _prompts():
    g = torch.Generator().manual_seed(1)
    lens = [5, 11, 8, 3]
    return [torch.randint(3, 200, (n,), generator=g).tolist() for n in lens]


def test_mc_scores_equal_one_forward_per_option():
    model = make_tiny_model(200)
    prompts = _prompts()
    g = torch.Generator().manual_seed(2)
    conts = [
        [torch.randint(3, 200, (n,), generator=g).tolist() for n in (1, 3, 2, 5)] for _ in prompts
    ]
    state = engine.prefill(model, prompts, PAD)
    got = engine.score_continuations(model, state, conts, PAD)
    for b, p in enumerate(prompts):
        for k, c in enumerate(conts[b]):
            assert abs(got[b][k] - naive_logprob(model, p, c)) < 1e-4, (b, k)


def test_token_ranks_equal_argsort_of_logits_at_each_teacher_forced_position():
    model = make_tiny_model(200)
    prompts = _prompts()
    state = engine.prefill(model, prompts, PAD)
    conts = [
        [[5, 17, 150]],
        [[17], [3, 9]],
        [],
        [[150, 4]],
    ]  # rows with 1, 2, 0 and 1 continuations
    got = engine.score_tokens(model, state, conts, PAD)
    assert [len(r) for r in got] == [1, 2, 0, 1]
    for b, p in enumerate(prompts):
        for k, c in enumerate(conts[b]):
            for j, t in enumerate(c):
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([p + c[:j]])).logits[0, -1]
                order = torch.argsort(logits, descending=True).tolist()
                assert got[b][k].ranks[j] == order.index(t) + 1, (b, k, j)
                assert abs(got[b][k].logprobs[j] - float(torch.log_softmax(logits, -1)[t])) < 1e-4


def test_scoring_leaves_prefill_cache_usable_for_greedy():
    model = make_tiny_model(200)
    prompts = _prompts()
    state = engine.prefill(model, prompts, PAD)
    engine.score_continuations(model, state, [[[7, 8, 9], [10]] for _ in prompts], PAD)
    stop = engine.StopRule(
        frozenset(), torch.zeros(200, dtype=torch.bool), torch.ones(200, dtype=torch.bool)
    )
    got = engine.greedy(model, state, 6, stop, PAD)
    for b, p in enumerate(prompts):
        assert got[b] == naive_greedy(model, p, 6), b


def _expected_with_rule(free, stop_ids, newline, content):
    """Reference for the stop rule, written independently of engine.greedy."""
    out, seen_content = [], False
    for t in free:
        if t in stop_ids:
            break
        out.append(t)
        seen_content = seen_content or bool(content[t])
        if newline[t] and seen_content:
            break
    return out


def test_greedy_stops_at_stop_token_and_after_content_newline():
    model = make_tiny_model(200)
    prompt = _prompts()[1]
    free = naive_greedy(model, prompt, 8)
    none = torch.zeros(200, dtype=torch.bool)
    every = torch.ones(200, dtype=torch.bool)
    cases = [
        (frozenset({free[3]}), none, every),  # a stop token
        (
            frozenset(),
            none.clone().index_fill_(0, torch.tensor([free[0], free[2]]), True),
            every.clone().index_fill_(0, torch.tensor([free[0]]), False),
        ),  # leading blank newline is skipped
    ]
    for stop_ids, newline, content in cases:
        got = engine.greedy(
            model,
            engine.prefill(model, [prompt], PAD),
            8,
            engine.StopRule(stop_ids, newline, content),
            PAD,
        )
        want = _expected_with_rule(free, stop_ids, newline, content)
        assert got == [want]
        assert len(want) < 8


def test_pad_batch_left_and_right():
    seqs = [[5, 6, 7], [8], []]
    ids, mask = engine.pad_batch(seqs, 9, "cpu", side="left")
    assert ids.tolist() == [[5, 6, 7], [9, 9, 8], [9, 9, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 0]]
    ids, mask = engine.pad_batch(seqs, 9, "cpu", side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 9, 9], [9, 9, 9]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [0, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long
    left = engine.left_pad(seqs, 9, "cpu")
    assert all(
        torch.equal(a, b) for a, b in zip(left, engine.pad_batch(seqs, 9, "cpu"), strict=True)
    )
    with pytest.raises(ValueError, match="side"):
        engine.pad_batch(seqs, 9, "cpu", side="middle")


def test_pad_id_falls_back_to_eos_then_zero():
    tok = SimpleNamespace
    assert engine.pad_id(tok(pad_token_id=3, eos_token_id=2)) == 3
    assert (
        engine.pad_id(tok(pad_token_id=0, eos_token_id=2)) == 0
    )  # 0 is a pad id, not a missing one
    assert engine.pad_id(tok(pad_token_id=None, eos_token_id=2)) == 2
    assert engine.pad_id(tok(pad_token_id=None, eos_token_id=0)) == 0
    assert engine.pad_id(tok(pad_token_id=None, eos_token_id=None)) == 0
