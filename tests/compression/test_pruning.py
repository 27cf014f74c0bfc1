"""Pruning: masks equal their formulas, N:M holds exactly, SparseGPT reconstructs best."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from benchmark_illusion.compression.blockwise import (
    Hessian,
    decoder_layers,
    float64_device,
    inverse_hessian_factor,
)
from benchmark_illusion.compression.pruning.layerwise import (
    PruneSettings,
    check_report,
    prune_model,
)
from benchmark_illusion.compression.pruning.magnitude import magnitude_mask
from benchmark_illusion.compression.pruning.masks import (
    Structure,
    lowest_n_of_m,
    lowest_per_matrix,
    lowest_per_row,
    n_pruned,
    nm_violations,
    parse_structure,
)
from benchmark_illusion.compression.pruning.sparsegpt import sparsegpt_prune
from benchmark_illusion.compression.pruning.wanda import InputNorms, wanda_mask, wanda_scores
from conftest import make_tiny_model, real_layer_inputs

VOCAB = 300


def windows(n=6, t=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (n, t), generator=g)


def linears(model):
    return {
        n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and "lm_head" not in n
    }


# ----------------------------------------------------------------- masks


def test_structure_parsing():
    assert parse_structure("2:4") == Structure(2, 4) and parse_structure("2of4") == Structure(2, 4)
    assert (
        str(Structure(2, 4)) == "2:4"
        and Structure(2, 4).path == "2of4"
        and Structure(4, 8).sparsity == 0.5
    )
    assert not parse_structure("unstructured").is_nm
    for bad in ("4:2", "0:4", "2:2", "2-4", "half"):
        with pytest.raises(ValueError):
            parse_structure(bad)


def test_per_row_mask_meets_the_matrix_total_exactly():
    scores = torch.rand(7, 10, generator=torch.Generator().manual_seed(1))
    mask = lowest_per_row(
        scores, 0.33
    )  # 70 * 0.33 = 23.1 -> 23 = 3 + 3 + 3 + 2 + 2 + 2 + 2 ... per row
    assert int(mask.sum()) == 23
    per_row = mask.sum(1)
    assert per_row.max() - per_row.min() <= 1
    for r in range(7):  # within a row the pruned scores are the lowest
        k = int(per_row[r])
        assert set(torch.nonzero(mask[r]).flatten().tolist()) == set(
            torch.argsort(scores[r])[:k].tolist()
        )


def test_per_matrix_and_n_of_m_masks():
    scores = torch.arange(24, dtype=torch.float32).flip(0).reshape(3, 8)
    m = lowest_per_matrix(scores, 0.25)
    assert int(m.sum()) == 6 and bool(m.flatten()[-6:].all())
    nm = lowest_n_of_m(torch.rand(5, 16), 2, 4)
    assert (nm.reshape(5, 4, 4).sum(-1) == 2).all()
    w = torch.randn(5, 16).masked_fill(nm, 0)
    assert nm_violations(w, 2, 4) == 0
    w[0, :4] = 1.0  # a group with no zero at all
    assert nm_violations(w, 2, 4) == 1


# -------------------------------------------------------------- whole-model pruning on a tiny model


def _captured_inputs(model, layer_idx, data):
    """Reference: inputs of each Linear of block `layer_idx`, from a full forward of the model."""
    layer = decoder_layers(model)[layer_idx]
    seen: dict[str, list] = {}
    hooks = [
        m.register_forward_hook(
            lambda mod, a, o, n=n: seen.setdefault(n, []).append(a[0].reshape(-1, a[0].shape[-1]))
        )
        for n, m in layer.named_modules()
        if isinstance(m, nn.Linear)
    ]
    with torch.no_grad():
        for i in range(0, data.shape[0], 3):
            model(input_ids=data[i : i + 3], use_cache=False)
    for h in hooks:
        h.remove()
    return {n: torch.cat(v) for n, v in seen.items()}


def test_wanda_masks_equal_the_formula_on_real_activations():
    data = windows()
    model = make_tiny_model(VOCAB, seed=5, layers=3)
    reference = copy.deepcopy(model)
    prune_model(model, data, PruneSettings("wanda", 0.5, batch_size=3), progress=False)
    # Independent reference: block by block, full forward passes of the partly pruned reference.
    for i, layer in enumerate(decoder_layers(reference)):
        x = _captured_inputs(reference, i, data)
        for name, lin in layer.named_modules():
            if isinstance(lin, nn.Linear):
                score = lin.weight.abs() * x[name].pow(2).sum(0).sqrt()
                k = lin.weight.shape[1] // 2
                idx = torch.argsort(score, dim=1)[:, :k]
                lin.weight.data.scatter_(1, idx, 0.0)
    for (name, got), (_, want) in zip(
        linears(model).items(), linears(reference).items(), strict=True
    ):
        assert torch.equal(got.weight == 0, want.weight == 0), name
        assert torch.equal(got.weight, want.weight), name


def test_magnitude_masks_equal_the_formula():
    model = make_tiny_model(VOCAB, seed=6)
    reference = copy.deepcopy(model)
    report = prune_model(model, None, PruneSettings("magnitude", 0.3), progress=False)
    for (name, got), (_, ref) in zip(
        linears(model).items(), linears(reference).items(), strict=True
    ):
        w = ref.weight.abs().flatten()
        k = round(w.numel() * 0.3)
        pruned = set(torch.argsort(w)[:k].tolist())
        assert set(torch.nonzero(got.weight.flatten() == 0).flatten().tolist()) == pruned, name
    assert report["measured_sparsity"] == pytest.approx(0.3, abs=1e-3)


@pytest.mark.parametrize(
    "method, pattern", [("magnitude", "2:4"), ("wanda", "2:4"), ("sparsegpt", "4:8")]
)
def test_n_of_m_groups_hold_exactly_n_zeros(method, pattern):
    st = parse_structure(pattern)
    model = make_tiny_model(VOCAB, seed=7)
    report = prune_model(
        model,
        windows(),
        PruneSettings(method, st.sparsity, st, batch_size=3, blocksize=32),
        progress=False,
    )
    for name, lin in linears(model).items():
        w = lin.weight
        zeros = (w.reshape(w.shape[0], -1, st.m) == 0).sum(-1)
        assert (zeros == st.n).all(), name
    assert report["nm_violations"] == 0
    check_report(report)


@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
def test_sparsity_zero_returns_bit_identical_weights(method):
    model = make_tiny_model(VOCAB, seed=8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = prune_model(model, windows(), PruneSettings(method, 0.0), progress=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert report["measured_sparsity"] == 0.0


@pytest.mark.parametrize("method", ["wanda", "sparsegpt"])
def test_pruning_is_deterministic(method):
    runs = []
    for _ in range(2):
        model = make_tiny_model(VOCAB, seed=9)
        prune_model(
            model,
            windows(seed=3),
            PruneSettings(method, 0.4, batch_size=2, blocksize=16),
            progress=False,
        )
        runs.append(model.state_dict())
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def at_threads(threads: int, fn):
    """fn() with torch (and its BLAS) at `threads` threads, the count restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "method, pattern",
    [
        ("magnitude", "unstructured"),
        ("wanda", "unstructured"),
        ("wanda", "2:4"),
        ("sparsegpt", "unstructured"),
        ("sparsegpt", "2:4"),
    ],
)
def test_pruning_gives_the_same_weights_at_one_and_two_threads(method, pattern):
    """The same model and calibration pruned with torch at 1 and at 2 threads: bit-identical
    weights, hence masks. In float32 the Cholesky factor of a Hessian already differs in its
    last bits between 1 and 2 threads at 64 inputs, and SparseGPT's weights with it."""
    st = parse_structure(pattern)
    data = windows(n=8, t=64, seed=4)

    def prune():
        model = make_tiny_model(VOCAB, seed=12)
        settings = PruneSettings(method, st.sparsity if st.is_nm else 0.3, st, blocksize=32)
        prune_model(model, data, settings, progress=False)
        return {n: m.weight.detach().clone() for n, m in linears(model).items()}

    one, two = at_threads(1, prune), at_threads(2, prune)
    for name in one:
        assert torch.equal(one[name], two[name]), name


def test_embeddings_and_lm_head_stay_dense():
    model = make_tiny_model(VOCAB, seed=10)
    emb = model.get_input_embeddings().weight.clone()
    head = model.lm_head.weight.clone()
    prune_model(
        model,
        windows(),
        PruneSettings("sparsegpt", 0.5, batch_size=3, blocksize=16),
        progress=False,
    )
    assert torch.equal(model.get_input_embeddings().weight, emb)
    assert torch.equal(model.lm_head.weight, head)


def test_sparsegpt_handles_dead_inputs():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(12, 16, generator=g)
    x = torch.randn(200, 16, generator=g)
    x[:, [3, 7]] = 0.0  # two inputs never active: zero rows/columns in H
    h = Hessian(16, "cpu")
    h.add(x)
    new, mask = sparsegpt_prune(w, h.value, 0.5, Structure(), blocksize=8)
    assert torch.isfinite(new).all()
    assert (new[:, [3, 7]] == 0).all()
    assert (new == 0).float().mean() == pytest.approx(0.5, abs=1e-9)


def test_settings_and_report_checks_fail_clearly():
    with pytest.raises(ValueError, match="implies sparsity 0.5"):
        PruneSettings("wanda", 0.3, Structure(2, 4))
    with pytest.raises(ValueError, match="unknown pruning method"):
        PruneSettings("random", 0.3)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        PruneSettings("wanda", 1.0)
    with pytest.raises(ValueError, match="percentage points"):
        check_report(
            {"measured_sparsity": 0.298, "target_sparsity": 0.3, "nm_violations": 0, "layers": {}}
        )
    with pytest.raises(ValueError, match="violate"):
        check_report(
            {
                "measured_sparsity": 0.5,
                "target_sparsity": 0.5,
                "nm_violations": 2,
                "structure": "2:4",
                "layers": {"a": {"nm_violations": 2}},
            }
        )


# ----------------------------------------------------------------- the real bundled model


@pytest.mark.e2e
def test_sparsegpt_reconstructs_real_layer_outputs_best(bundled_model_dir):
    """On real activations of SmolLM2 (layer 5), ||WX - W'X|| at 50%: SparseGPT < Wanda,
    magnitude."""

    from benchmark_illusion.models.checkpoints import load_checkpoint

    model, tok = load_checkpoint(bundled_model_dir)
    for name in ("self_attn.q_proj", "mlp.down_proj"):
        x, lin = real_layer_inputs(model, tok, name, ("en", "de"), 8)
        x_cal = x[: 6 * 128]  # the first 6 windows: the calibration
        hess = Hessian(lin.in_features, "cpu")
        hess.add(x_cal)
        w = lin.weight.detach()
        for st in (Structure(), Structure(2, 4)):
            errors = {}
            candidates = {
                "magnitude": w.masked_fill(magnitude_mask(w, 0.5, st), 0),
                "wanda": w.masked_fill(wanda_mask(w, x_cal.pow(2).sum(0), 0.5, st), 0),
                "sparsegpt": sparsegpt_prune(w, hess.value, 0.5, st)[0],
            }
            for method, w2 in candidates.items():
                errors[method] = float(torch.linalg.norm(x_cal @ w.T - x_cal @ w2.T))
            assert errors["sparsegpt"] < min(errors["wanda"], errors["magnitude"]), (
                name,
                str(st),
                errors,
            )


@pytest.mark.parametrize("n,m", [(2, 4), (4, 8)])
def test_n_of_m_prunes_the_n_smallest_of_every_group_of_real_weights(bundled_model_dir, n, m):
    """Against a per-group argsort on the real model's weights (|W| of one MLP and one attention
    projection): the mask holds exactly the n smallest of every m consecutive inputs. Counting
    zeros per group alone would pass a mask of the n largest."""
    from safetensors.torch import load_file

    weights = load_file(bundled_model_dir / "model.safetensors")
    for name in ("model.layers.5.mlp.down_proj.weight", "model.layers.5.self_attn.q_proj.weight"):
        scores = weights[name].abs()
        rows, cols = scores.shape
        groups = scores.reshape(rows, cols // m, m)
        order = torch.argsort(groups, dim=2, stable=True)[..., :n]
        want = torch.zeros_like(groups, dtype=torch.bool).scatter_(2, order, True)
        got = lowest_n_of_m(scores, n, m).reshape(rows, cols // m, m)
        # ties inside a group may be broken either way: compare the pruned scores, not indices
        assert got.sum(2).eq(n).all()
        pruned = torch.where(got, groups, 0).sum(2)
        expected = torch.where(want, groups, 0).sum(2)
        assert torch.equal(pruned, expected), name


def test_n_of_m_needs_whole_groups_and_says_which():
    """A row of 6 inputs has no whole groups of 4: refused, naming the dimension and M."""
    with pytest.raises(ValueError, match=r"input dimension \(6\) to be a multiple of M=4"):
        lowest_n_of_m(torch.zeros(2, 6), 2, 4)


@pytest.mark.parametrize("n,m", [(2, 4), (1, 4), (4, 8)])
def test_n_of_m_prunes_the_n_smallest_of_every_group(n, m):
    """Against a per-group argsort (distinct scores, so no ties): the mask holds exactly the n
    lowest of every m consecutive inputs of a row; a mask of the n largest has the same counts."""
    scores = torch.randperm(6 * 16, generator=torch.Generator().manual_seed(n * m)).float()
    scores = scores.reshape(6, 16)
    groups = scores.reshape(6, 16 // m, m)
    lowest = torch.argsort(groups, dim=2)[..., :n]
    want = torch.zeros_like(groups, dtype=torch.bool).scatter_(2, lowest, True)
    assert torch.equal(lowest_n_of_m(scores, n, m), want.reshape(6, 16))


def test_hessian_is_two_x_transpose_x_over_the_tokens_in_float64():
    """H = 2 X^T X / n (module docstring), accumulated over batches in float64 whatever the inputs'
    dtype or the default dtype. By hand: X = [[1, 2], [3, 4]] then [[0, 1]]: X^T X = [[10, 14],
    [14, 21]], n = 3."""
    h = Hessian(2, "cpu")
    h.add(torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64))
    h.add(torch.tensor([[[0.0, 1.0]]]))  # [batch, tokens, in], float32
    assert h.tokens == 3
    want = 2.0 * torch.tensor([[10.0, 14.0], [14.0, 21.0]], dtype=torch.float64) / 3
    assert h.value.dtype == torch.float64 and torch.equal(h.value, want)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        assert Hessian(2, "cpu").sum.dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)


def test_norms_and_hessians_keep_what_float32_sums_lose():
    """float32 inputs whose sums float32 cannot hold: 1e4^2 = 1e8 plus four 1s. float32 has a
    spacing of 8 at 1e8, so a float32 accumulator (in one batch or across batches) stays at 1e8;
    the float64 one holds 1e8 + 4 exactly, in the Wanda norms and in the Hessian."""
    big = torch.tensor([[1e4, 1.0], [1.0, 1.0]])  # float32, both exact
    norms, hess = InputNorms(2, "cpu"), Hessian(2, "cpu")
    for x in (big, torch.tensor([[1.0, 0.0]]), torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])):
        norms.add(x)
        hess.add(x)
    assert norms.sq.dtype == torch.float64
    assert norms.sq.tolist() == [1e8 + 4, 2.0]
    assert hess.sum.tolist() == [[1e8 + 4, 1e4 + 1], [1e4 + 1, 2.0]]
    assert torch.tensor(1e8, dtype=torch.float32) + 4 == 1e8  # what float32 would have kept


def test_wanda_ranks_by_norms_that_differ_beyond_float32():
    """Two weights of equal |W| whose inputs' squared norms are 1e8 + 4 and 1e8 + 2: equal in
    float32 (a tie, which would prune the first column), different in float64, where the second
    column has the lower score and is pruned. The scores are float64 too: sqrt(1e8 + 4) and
    sqrt(1e8 + 2) are 1e-4 apart, within float32's spacing of 1e-3 at 1e4."""
    norms = InputNorms(2, "cpu")
    norms.add(torch.tensor([[1e4, 1e4]]))
    for _ in range(4):
        norms.add(torch.tensor([[1.0, 0.0]]))
    for _ in range(2):
        norms.add(torch.tensor([[0.0, 1.0]]))
    w = torch.ones(3, 2)
    assert wanda_scores(w, norms.sq).dtype == torch.float64
    mask = wanda_mask(w, norms.sq, 0.5, Structure())
    assert torch.equal(mask, torch.tensor([[False, True]] * 3))


def test_the_inverse_hessian_factor_is_the_same_at_one_and_two_threads():
    """LAPACK's blocked Cholesky factor differs in its last bits between 1 and 2 threads, in
    float64 too (MKL, from 64 inputs on): blockwise.inverse_hessian_factor factorizes at one
    thread on the CPU, then gives the caller's thread count back."""
    x = torch.randn(512, 128, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    h = x.T @ x
    one = at_threads(1, lambda: inverse_hessian_factor(h, 0.01)[0])
    two, threads = at_threads(
        2, lambda: (inverse_hessian_factor(h, 0.01)[0], torch.get_num_threads())
    )
    assert torch.equal(one, two) and threads == 2


def test_masks_and_hessians_stay_on_the_scores_device():
    """Made on the device of their input (the meta device stands in for a GPU)."""
    assert Hessian(3, "meta").sum.device.type == "meta"
    assert lowest_per_matrix(torch.zeros(2, 4, device="meta"), 0.5).device.type == "meta"
    assert lowest_per_row(torch.zeros(2, 4, device="meta"), 0.5).device.type == "meta"
    assert lowest_n_of_m(torch.zeros(2, 4, device="meta"), 2, 4).device.type == "meta"


def test_float64_work_stays_on_the_device_except_on_mps():
    """Apple's MPS has no float64: its statistics and scores are computed on the CPU; every
    other device keeps them (and the masks come back to the weight's device)."""
    assert float64_device("mps") == torch.device("cpu")
    assert float64_device(torch.device("mps", 0)) == torch.device("cpu")
    for dev in ("cpu", "cuda:1", "meta"):
        assert float64_device(dev) == torch.device(dev)
    assert InputNorms(3, "meta").sq.dtype == torch.float64


def test_per_row_ties_break_by_position():
    """Equal scores in a row (masks.lowest_per_row: a stable sort): the first columns go, so the
    same weights are pruned on every run and machine. 64 columns: an unstable sort reorders
    ties at this size."""
    mask = lowest_per_row(torch.zeros(3, 64), 0.25)
    assert torch.equal(mask, (torch.arange(64) < 16).expand(3, 64))


def test_per_matrix_and_n_of_m_ties_break_by_position():
    """Equal scores (masks.lowest_per_matrix, lowest_n_of_m: stable sorts): the first positions go,
    row-major in a matrix and the first columns of an N:M group, so that equal |W| (common in
    weights imported from a quantized file) give the same mask on every device. torch.topk
    chooses others among these ties."""
    assert torch.equal(
        lowest_per_matrix(torch.zeros(3, 64), 0.25).flatten(), torch.arange(192) < 48
    )
    want = (torch.arange(16) % 4 < 2).expand(3, 16)
    assert torch.equal(lowest_n_of_m(torch.zeros(3, 16), 2, 4), want)
    w = torch.tensor([[1.0, -1.0, 1.0, 2.0], [-2.0, 1.0, -1.0, 1.0]])  # |W| ties in both
    assert torch.equal(
        magnitude_mask(w, 0.5, Structure()), torch.tensor([[1, 1, 1, 0], [0, 1, 0, 0]]).bool()
    )


def test_per_matrix_mask_is_a_stable_sorts_first_k():
    """lowest_per_matrix selects by the k-th lowest score and the positions of its ties: the
    same set as the first k of a stable argsort, on matrices full of ties (few distinct scores,
    some sizes and sparsities)."""
    g = torch.Generator().manual_seed(5)
    for trial in range(60):
        rows, cols = torch.randint(1, 30, (2,), generator=g).tolist()
        levels = 1 + trial % 5
        scores = torch.randint(0, levels, (rows, cols), generator=g).double()
        sparsity = float(torch.rand(1, generator=g)) * 0.99
        k = n_pruned(rows * cols, sparsity)
        want = torch.zeros(rows * cols, dtype=torch.bool)
        want[torch.argsort(scores.flatten(), stable=True)[:k]] = True
        assert torch.equal(lowest_per_matrix(scores, sparsity), want.view(rows, cols)), trial


# ----------------------------------------------------------------- SparseGPT against plain OBS


def reference_sparsegpt(w, h, sparsity, st, blocksize, percdamp):
    """SparseGPT as the module docstring of pruning/sparsegpt.py states it, in float64 and
    without the Cholesky shortcut: dead inputs (H_jj = 0) get H_jj = 1 and W[:, j] = 0, H is
    damped by percdamp * mean(diag H), and column j is eliminated with the optimal-brain-surgeon
    update over the columns F = j.. still to do, from the explicit inverse of H[F, F]:
    W[:, F] -= (W[:, j] - kept) / Hinv_F[j, j] * Hinv_F[j, F]. The mask score of a column is
    w^2 / Hinv_F[j, j], chosen per block (unstructured: the block's lowest fraction) or per
    group of M at its first column (N:M: the N lowest of each row)."""
    w, h = w.double().clone(), h.double().clone()
    dead = torch.diagonal(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += percdamp * torch.diagonal(h).mean() * torch.eye(h.shape[0], dtype=h.dtype)
    rows, cols = w.shape
    hinv_jj = torch.tensor([torch.linalg.inv(h[j:, j:])[0, 0] for j in range(cols)])
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    for j in range(cols):
        if not st.is_nm and j % blocksize == 0:
            b = slice(j, min(j + blocksize, cols))
            score = (w[:, b] ** 2 / hinv_jj[b]).flatten()
            k = round(score.numel() * sparsity)
            block = torch.zeros(score.numel(), dtype=torch.bool)
            block[torch.argsort(score)[:k]] = True
            mask[:, b] = block.view(rows, -1)
        if st.is_nm and j % st.m == 0:
            g = slice(j, j + st.m)
            lowest = torch.argsort(w[:, g] ** 2 / hinv_jj[g], dim=1)[:, : st.n]
            mask[:, g] = torch.zeros(rows, st.m, dtype=torch.bool).scatter_(1, lowest, True)
        hinv = torch.linalg.inv(h[j:, j:])
        err = torch.where(mask[:, j], w[:, j], 0.0)  # what pruning removes from column j
        w[:, j:] -= err[:, None] / hinv[0, 0] * hinv[0, :][None, :]
        w[:, j] = torch.where(mask[:, j], 0.0, w[:, j])
    return w, mask


def _layer(seed, dead=(), spread=False):
    """A weight [8, 16] and the Hessian of 200 small inputs (H_jj about 0.02, so the damping and
    a dead input's H_jj = 1 weigh in), some inputs never active. spread: input j scaled by
    4^(j mod 4 - 2), so that within every group of 4 columns the inverse Hessian's diagonal
    differs by up to 256x and the mask score's w^2 / Hinv_jj ranks columns unlike w^2 alone."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(8, 16, generator=g, dtype=torch.float64)
    x = 0.1 * torch.randn(200, 16, generator=g, dtype=torch.float64)
    if spread:
        x *= 4.0 ** (torch.arange(16, dtype=torch.float64) % 4 - 2)
    x[:, list(dead)] = 0.0
    h = Hessian(16, "cpu")
    h.add(x)
    return w, h.value.double()


@pytest.mark.parametrize(
    "st, blocksize, percdamp, spread",
    [
        (Structure(), 16, 0.01, False),
        (Structure(), 8, 0.1, False),
        (Structure(2, 4), 8, 0.05, False),
        (Structure(), 16, 0.01, True),
        (Structure(2, 4), 8, 0.01, True),
    ],
)
def test_sparsegpt_equals_plain_obs(st, blocksize, percdamp, spread):
    w, h = _layer(11, dead=(3, 12), spread=spread)
    got_w, got_mask = sparsegpt_prune(w, h, 0.5, st, blocksize=blocksize, percdamp=percdamp)
    want_w, want_mask = reference_sparsegpt(w, h, 0.5, st, blocksize, percdamp)
    assert got_mask.dtype == torch.bool and torch.equal(got_mask, want_mask)
    assert got_w.dtype == w.dtype
    assert torch.allclose(got_w, want_w, rtol=1e-4, atol=1e-5)


def test_sparsegpt_defaults_are_blocks_of_128_and_1_percent_damping():
    """config/README.md: sparsegpt.blocksize 128 (a multiple of 4, so 2:4 runs with it), percdamp
    0.01. 16 columns fit in one block of 128."""
    w, h = _layer(12)
    for st in (Structure(), Structure(2, 4)):
        got_w, got_mask = sparsegpt_prune(w, h, 0.5, st)
        want_w, want_mask = reference_sparsegpt(w, h, 0.5, st, 128, 0.01)
        assert torch.equal(got_mask, want_mask)
        assert torch.allclose(got_w, want_w, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="blocksize 6 must be a multiple of M=4"):
        sparsegpt_prune(w, h, 0.5, Structure(2, 4), blocksize=6)
