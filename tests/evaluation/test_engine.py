"""The batched primitives equal naive one-sequence computations on a tiny real-architecture
model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from benchmark_illusion.evaluation import engine, generation
from conftest import make_tiny_model
from engine_helpers import left_pad, score_continuations

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
    got = score_continuations(model, state, conts, PAD)
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
    score_continuations(model, state, [[[7, 8, 9], [10]] for _ in prompts], PAD)
    stop = generation.StopRule(
        frozenset(), torch.zeros(200, dtype=torch.bool), torch.ones(200, dtype=torch.bool)
    )
    got = generation.greedy(model, state, 6, stop, PAD)
    for b, p in enumerate(prompts):
        assert got[b] == naive_greedy(model, p, 6), b


def _expected_with_rule(free, stop_ids, newline, content):
    """Reference for the stop rule, written independently of generation.greedy."""
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
        got = generation.greedy(
            model,
            engine.prefill(model, [prompt], PAD),
            8,
            generation.StopRule(stop_ids, newline, content),
            PAD,
        )
        want = _expected_with_rule(free, stop_ids, newline, content)
        assert got == [want]
        assert len(want) < 8


def _hf_new_tokens(model, prompt, stop_ids, **kwargs):
    """transformers' generate on one unpadded prompt: its new tokens, cut at the first stop."""
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([prompt]),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
            pad_token_id=PAD,
            eos_token_id=sorted(stop_ids),
            **kwargs,
        )[:, len(prompt) :].tolist()
    return [row[: next((j for j, t in enumerate(row) if t in stop_ids), len(row))] for row in out]


def test_beam_search_from_one_prefill_equals_transformers_beam_search():
    """Every hypothesis, in order, of K beams per row equals generate(num_beams=K) run on that
    prompt alone with its own budget: left-padded rows of different lengths and budgets share
    one prefill, and stop tokens end some hypotheses early."""
    model = make_tiny_model(200, seed=3)
    prompts = _prompts()
    # stop ids the model does produce: the third greedy token of two prompts
    stop_ids = {naive_greedy(model, prompts[0], 3)[2], naive_greedy(model, prompts[2], 3)[2]}
    budgets = [6, 3, 8, 5]
    got = generation.beam_search(model, engine.prefill(model, prompts, PAD), 4, budgets, stop_ids)
    early = 0
    for b, p in enumerate(prompts):
        want = _hf_new_tokens(
            model,
            p,
            stop_ids,
            num_beams=4,
            num_return_sequences=4,
            do_sample=False,
            early_stopping=True,
            max_new_tokens=budgets[b],
        )
        assert got[b] == want, b
        early += sum(len(h) < budgets[b] for h in want)
    assert early > 0  # some hypotheses ended on a stop token, not at the budget


def test_sampling_from_one_prefill_draws_what_transformers_draws():
    """Same seed, same rows: the samples equal generate(do_sample=True, num_return_sequences=n)
    cut by the same stop rule, while each row's prompt ran once, not n times."""
    model = make_tiny_model(200, seed=5)
    with torch.no_grad():  # a flatter distribution, so that top_p leaves several tokens
        model.lm_head.weight.mul_(0.2)
    prompts = _prompts()[:3]
    stop_ids = frozenset({naive_greedy(model, prompts[0], 2)[1]})
    stop = generation.StopRule(
        stop_ids, torch.zeros(200, dtype=torch.bool), torch.ones(200, dtype=torch.bool)
    )
    gen = torch.Generator().manual_seed(11)
    got = generation.sample(
        model,
        engine.prefill(model, prompts, PAD),
        5,
        [7] * 3,
        stop,
        gen,
        top_p=0.8,
        temperature=0.9,
    )
    torch.manual_seed(11)
    ids, mask = engine.pad_batch(prompts, PAD, "cpu")
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            top_p=0.8,
            top_k=0,
            temperature=0.9,
            num_return_sequences=5,
            max_new_tokens=7,
            pad_token_id=PAD,
            eos_token_id=sorted(stop_ids),
        )[:, ids.shape[1] :].tolist()
    want = [row[: next((j for j, t in enumerate(row) if t in stop_ids), 7)] for row in out]
    flat = [s for row in got for s in row]
    assert flat == want
    assert len({tuple(s) for s in flat}) > 5  # the samples differ
    assert any(len(s) < 7 for s in flat)  # and some ended on the stop token


def test_sampling_stops_a_row_after_a_content_line_and_keeps_later_draws():
    """A row that ends early (line break after content) keeps the other rows' draws unchanged."""
    model = make_tiny_model(200, seed=5)
    with torch.no_grad():
        model.lm_head.weight.mul_(0.2)
    prompts = _prompts()[:2]
    none = torch.zeros(200, dtype=torch.bool)
    every = torch.ones(200, dtype=torch.bool)

    def three_samples(newline):
        state = engine.prefill(model, prompts, PAD)
        stop = generation.StopRule(frozenset(), newline, every)
        return generation.sample(model, state, 3, [6, 6], stop, torch.Generator().manual_seed(2))

    free = three_samples(none)
    # make the second token of the first sample a line break
    nl = none.clone()
    nl[free[0][0][1]] = True
    cut = three_samples(nl)
    for b in range(2):
        for j in range(3):
            want = _expected_with_rule(free[b][j], frozenset(), nl, every)
            assert cut[b][j] == want, (b, j)
    assert cut[0][0] == free[0][0][:2]


def test_expand_repeats_rows_and_leaves_the_state_untouched():
    model = make_tiny_model(200)
    prompts = _prompts()[:2]
    state = engine.prefill(model, prompts, PAD)
    before = [layer.keys.clone() for layer in state.cache.layers]
    big = generation.expand(state, 3)
    assert big.mask.shape[0] == 6 and torch.equal(big.mask[3], state.mask[1])
    assert torch.equal(big.cache.layers[0].keys[4], state.cache.layers[0].keys[1])
    big.cache.reorder_cache(torch.tensor([5, 4, 3, 2, 1, 0]))
    assert all(
        torch.equal(a, layer.keys) for a, layer in zip(before, state.cache.layers, strict=True)
    )
    # with room: in-place appends that read exactly like DynamicLayer's, past the room too
    roomy = generation.expand(state, 3, room=2)
    plain = generation.expand(state, 3)
    assert all(isinstance(layer, generation.RoomyLayer) for layer in roomy.cache.layers)
    stop = generation.StopRule(
        frozenset(), torch.zeros(200, dtype=torch.bool), torch.ones(200, dtype=torch.bool)
    )
    assert generation.greedy(model, roomy, 5, stop, PAD) == generation.greedy(
        model, plain, 5, stop, PAD
    )
    assert all(
        torch.equal(a, layer.keys) for a, layer in zip(before, state.cache.layers, strict=True)
    )


def test_pad_batch_left_and_right():
    seqs = [[5, 6, 7], [8], []]
    ids, mask = engine.pad_batch(seqs, 9, "cpu", side="left")
    assert ids.tolist() == [[5, 6, 7], [9, 9, 8], [9, 9, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 0]]
    ids, mask = engine.pad_batch(seqs, 9, "cpu", side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 9, 9], [9, 9, 9]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [0, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long
    left = left_pad(seqs, 9, "cpu")
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


def _headed_prompts():
    """Prompts that share a 20-token head (like a chat template's system turn), then differ."""
    g = torch.Generator().manual_seed(3)
    head = torch.randint(3, 200, (20,), generator=g).tolist()
    return [head + torch.randint(3, 200, (n,), generator=g).tolist() for n in (4, 9, 1, 6)]


def test_shared_head_length():
    assert engine.shared_head([[1] * 30, [1] * 20 + [2]]) == 20
    assert engine.shared_head([[1] * 30, [1] * 30]) == 29  # each row keeps a token of its own
    assert engine.shared_head([[1] * 30, [1] * 10 + [2]]) == 0  # under the minimum
    assert engine.shared_head([[1] * 30]) == 0


def test_prefill_with_a_shared_head_reads_like_each_prompt_alone():
    model = make_tiny_model(200)
    prompts = _headed_prompts()
    shared = engine.prefill(model, prompts, PAD)
    plain = engine.prefill(model, prompts, PAD, share=False)
    assert shared.mask.shape[1] == 20 + 9 and not bool(shared.mask[2, 20:-1].any())
    assert torch.equal(shared.next_pos, plain.next_pos)
    assert torch.allclose(shared.last_logits, plain.last_logits, atol=1e-5)
    conts = [[[7, 8, 9], [10]] for _ in prompts]
    got = score_continuations(model, shared, conts, PAD)
    for b, p in enumerate(prompts):
        for k, c in enumerate(conts[b]):
            assert abs(got[b][k] - naive_logprob(model, p, c)) < 1e-4, (b, k)
    stop = generation.StopRule(
        frozenset(), torch.zeros(200, dtype=torch.bool), torch.ones(200, dtype=torch.bool)
    )
    out = generation.greedy(model, shared, 6, stop, PAD)
    assert out == [naive_greedy(model, p, 6) for p in prompts]


def test_stacked_states_decode_like_each_batch_alone_with_per_row_budgets():
    model = make_tiny_model(200)
    a, b = _prompts(), _headed_prompts()[:2]  # widths 11 and 29: rows padded differently
    budgets = [6, 2, 4, 1, 5, 3]
    rows = a + b
    # token 5 ends a row early: the rows that finish leave the batch while the others run on
    five = generation.StopRule(
        frozenset({5}), torch.zeros(200, dtype=torch.bool), torch.ones(200, dtype=torch.bool)
    )
    state = generation.stack([engine.prefill(model, a, PAD), engine.prefill(model, b, PAD)], room=3)
    assert state.mask.shape == (6, 29)
    got = generation.greedy(model, state, budgets, five, PAD)
    for r, p in enumerate(rows):
        free = naive_greedy(model, p, budgets[r])
        want = free[: free.index(5)] if 5 in free else free
        assert got[r] == want, r
    with pytest.raises(ValueError, match="2 budgets for 6 rows"):
        generation.greedy(model, state, [1, 2], five, PAD)


def test_a_ban_keeps_every_decode_off_its_rows_tokens_and_changes_nothing_else():
    """The positive control's ban: per row, tokens no decode may write (greedy, beams, samples),
    other rows decoded as without a ban; an empty ban changes nothing."""
    model = make_tiny_model(200, seed=3)
    prompts = _prompts()
    stop = generation.StopRule(
        frozenset(), torch.zeros(200, dtype=torch.bool), torch.ones(200, dtype=torch.bool)
    )
    free = generation.greedy(model, engine.prefill(model, prompts, PAD), 6, stop, PAD)
    # row 0 may not write what it wrote; row 2 not its first token; rows 1 and 3 free
    ban = [sorted(set(free[0])), [], [free[2][0]], []]
    got = generation.greedy(model, engine.prefill(model, prompts, PAD), 6, stop, PAD, ban=ban)
    assert not set(got[0]) & set(ban[0]) and free[2][0] not in got[2]
    assert got[1] == free[1] and got[3] == free[3]
    assert got[0] != free[0]
    empty = generation.greedy(
        model, engine.prefill(model, prompts, PAD), 6, stop, PAD, ban=[[]] * 4
    )
    assert empty == free
    beams = generation.beam_search(
        model, engine.prefill(model, prompts, PAD), 3, [5] * 4, set(), ban=ban
    )
    assert all(not set(h) & set(ban[0]) for h in beams[0])
    assert all(free[2][0] not in h for h in beams[2])
    samples = generation.sample(
        model,
        engine.prefill(model, prompts, PAD),
        4,
        [5] * 4,
        stop,
        torch.Generator().manual_seed(1),
        ban=ban,
    )
    assert all(not set(s) & set(ban[0]) for s in samples[0])
    assert all(free[2][0] not in s for s in samples[2])
    with pytest.raises(ValueError, match="ban lists"):
        generation.greedy(model, engine.prefill(model, prompts, PAD), 6, stop, PAD, ban=[[]])
