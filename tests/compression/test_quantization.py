"""RTN and GPTQ: the grid formula by hand, every weight on its group's grid, and GPTQ's layer
reconstruction on real activations of the bundled model."""

from __future__ import annotations

import pytest
import torch

from benchmark_illusion.compression.blockwise import Hessian
from benchmark_illusion.compression.quantization import (
    Grid,
    QuantizeSettings,
    check_report,
    distinct_per_group,
    gptq,
    quantize_model,
    rtn,
)
from benchmark_illusion.compression.structures import parse_grid
from conftest import make_tiny_model, real_layer_inputs


def test_rtn_equals_its_formula_on_a_hand_made_matrix():
    w = torch.tensor([[0.0, 1.0, 2.0, 3.0, -2.0, -1.0, 0.5, 6.0]])
    # 2 bits, asymmetric, groups of 4. Group 1: lo 0, hi 3 -> scale 1, zero 0: exact.
    # Group 2: lo -2, hi 6 -> scale 8/3, zero round(0.75) = 1; w/scale = -0.75, -0.375,
    # 0.1875, 2.25 round to -1, 0, 0, 2, +1 and clamp to [0, 3]: 0, 1, 1, 3 -> -8/3, 0, 0, 16/3.
    got = rtn(w, Grid(bits=2, group_size=4))
    want = torch.tensor([[0.0, 1.0, 2.0, 3.0, -8 / 3, 0.0, 0.0, 16 / 3]])
    assert torch.allclose(got, want, atol=1e-6), got
    # Symmetric, per channel: hi = |1| -> scale 2/3, zero 2; w/scale = 1.5, -0.75, 0.3, 0 round
    # (half to even) to 2, -1, 0, 0, +2 and clamp to [0, 3]: 3, 1, 2, 2 -> 2/3, -2/3, 0, 0.
    w = torch.tensor([[1.0, -0.5, 0.2, 0.0]])
    got = rtn(w, Grid(bits=2, group_size=-1, symmetric=True))
    assert torch.allclose(got, torch.tensor([[2 / 3, -2 / 3, 0.0, 0.0]]), atol=1e-6), got
    # a group of zeros stays zero; the dtype is kept
    z = rtn(torch.zeros(2, 4, dtype=torch.bfloat16), Grid(bits=4, group_size=4))
    assert z.dtype == torch.bfloat16 and not z.any()


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("symmetric", [False, True])
def test_every_quantized_weight_lies_on_its_groups_grid(bits, symmetric):
    g = torch.Generator().manual_seed(bits)
    w = torch.randn(24, 96, generator=g)
    x = torch.randn(400, 96, generator=g) * torch.linspace(0.1, 3, 96)
    h = Hessian(96, "cpu")
    h.add(x)
    grid = Grid(bits=bits, group_size=32, symmetric=symmetric)
    for name, q in (
        ("rtn", rtn(w, grid)),
        ("gptq", gptq(w, h.value, grid, blocksize=64)),
        ("gptq act_order", gptq(w, h.value, grid, blocksize=64, act_order=True)),
    ):
        counts = distinct_per_group(q, grid)
        assert counts.shape == (24, 3)
        assert int(counts.max()) <= 2**bits, name
        # each group's values are levels of one uniform grid: integer multiples of the step
        for c0 in range(0, 96, 32):
            vals = torch.unique(q[:, c0 : c0 + 32][0])
            if len(vals) > 1:
                step = (vals[1:] - vals[:-1]).min()
                k = (vals - vals[0]) / step
                assert torch.allclose(k, k.round(), atol=1e-3), (name, c0)
    # the grid really is coarse: fewer distinct values than a dense random row has
    assert int(distinct_per_group(w, grid).min()) == 32


def test_grid_rejects_bad_settings():
    with pytest.raises(ValueError, match="bits"):
        Grid(bits=5)
    with pytest.raises(ValueError, match="group_size"):
        Grid(group_size=0)


def test_structure_names_round_trip_and_bad_names_are_refused():
    for grid in (Grid(4, 128), Grid(8, -1), Grid(3, 64, True), Grid(2, 1)):
        assert parse_grid(str(grid)) == grid
    assert str(Grid(4, 128)) == "int4-g128" and str(Grid(8, -1, True)) == "int8-pc-sym"
    for bad in ("int4", "int4-128", "4bit-g128", "int5-g128", "int4-g0", "int4-g128-asym"):
        with pytest.raises(ValueError):
            parse_grid(bad)


@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_quantize_model_puts_every_decoder_linear_on_its_grid_and_nothing_else(method):
    model = make_tiny_model(97, layers=2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    windows = torch.randint(0, 97, (4, 24), generator=torch.Generator().manual_seed(1))
    grid = Grid(bits=3, group_size=32)
    report = quantize_model(
        model, windows, QuantizeSettings(method, grid, batch_size=3), progress=False
    )
    check_report(report)
    assert report["off_grid_groups"] == 0 and report["max_distinct_per_group"] <= 8
    assert len(report["layers"]) == 2 * 7  # q k v o gate up down per block
    for name, p in model.named_parameters():
        if name.endswith("proj.weight"):
            assert int(distinct_per_group(p, grid).max()) <= 8, name
            assert not torch.equal(p, before[name]), name
        else:
            assert torch.equal(p, before[name]), name
    assert report["calibration_windows"] == (None if method == "rtn" else [4, 24])
    # the check fails a layer whose groups hold more values than the grid has levels
    report["layers"]["model.layers.0.self_attn.q_proj"]["off_grid_groups"] = 3
    report["off_grid_groups"] = 3
    with pytest.raises(ValueError, match="not on a 3-bit grid.*q_proj"):
        check_report(report)
    if method == "gptq":
        with pytest.raises(ValueError, match="needs calibration windows"):
            quantize_model(model, None, QuantizeSettings("gptq", grid), progress=False)


def test_quantize_settings_refuse_bad_values():
    with pytest.raises(ValueError, match="unknown quantization method"):
        QuantizeSettings("awq")
    with pytest.raises(ValueError, match="percdamp"):
        QuantizeSettings("gptq", percdamp=0.0)


def test_static_groups_keep_the_grids_of_the_original_weights():
    """With static groups every group's values are levels of the grid RTN computes from the
    original weights; without, the grid of a later group follows the updated weights."""
    from benchmark_illusion.compression.quantization import grid_params

    g = torch.Generator().manual_seed(3)
    w = torch.randn(16, 96, generator=g)
    x = torch.randn(300, 96, generator=g) @ torch.randn(96, 96, generator=g)  # correlated inputs
    h = Hessian(96, "cpu")
    h.add(x)
    grid = Grid(bits=3, group_size=32)

    def on_original_grids(q):
        for c0 in range(0, 96, 32):
            scale, zero = grid_params(w[:, c0 : c0 + 32], grid)
            k = q[:, c0 : c0 + 32] / scale + zero
            if not torch.allclose(k, k.round(), atol=1e-4) or k.min() < -1e-4 or k.max() > 7.0001:
                return False
        return True

    assert on_original_grids(gptq(w, h.value, grid, static_groups=True))
    assert on_original_grids(gptq(w, h.value, grid, act_order=True))
    assert not on_original_grids(gptq(w, h.value, grid))


def test_gptq_with_an_identity_hessian_is_rtn():
    """No correlation between inputs: nothing to compensate, GPTQ rounds like RTN."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 64, generator=g)
    grid = Grid(bits=3, group_size=16)
    assert torch.allclose(gptq(w, torch.eye(64), grid, percdamp=0.0), rtn(w, grid), atol=1e-6)


def test_gptq_works_in_float64_and_returns_the_weights_dtype():
    """The Hessian and the updates are float64; the result has the weight's dtype (a float32
    weight gets the float64 result rounded once) and lies on the grid."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(8, 64, generator=g)
    x = torch.randn(256, 64, generator=g)
    hess = Hessian(64, "cpu")
    hess.add(x)
    assert hess.value.dtype == torch.float64
    grid = Grid(bits=3, group_size=16)
    q32 = gptq(w, hess.value, grid)
    q64 = gptq(w.double(), hess.value, grid)
    assert q32.dtype == torch.float32 and q64.dtype == torch.float64
    assert torch.equal(q32, q64.float())
    assert int(distinct_per_group(q32, grid).max()) <= 8


def test_gptq_gives_the_same_weights_at_one_and_two_threads():
    """The same model and calibration quantized with torch at 1 and at 2 threads: bit-identical
    weights. In float32 the Cholesky factor of the Hessian differs in its last bits between 1
    and 2 threads, and the rounded weights with it."""
    windows = torch.randint(0, 97, (8, 64), generator=torch.Generator().manual_seed(2))

    def quantize(threads):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            model = make_tiny_model(97, seed=5, layers=2)
            settings = QuantizeSettings("gptq", Grid(bits=4, group_size=32), blocksize=32)
            quantize_model(model, windows, settings, progress=False)
        finally:
            torch.set_num_threads(before)
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    one, two = quantize(1), quantize(2)
    for name in one:
        assert torch.equal(one[name], two[name]), name


@pytest.mark.e2e
def test_gptq_reconstructs_real_layer_outputs_better_than_rtn(bundled_model_dir):
    """On real activations of SmolLM2 (layer 5), ||WX - W'X||: GPTQ < RTN at 4 and 3 bits, with
    and without act_order, on the calibration tokens (GPTQ's objective); on held-out tokens too
    for q_proj (576 inputs).

    Held-out needs calibration tokens well beyond the input width: with 768 tokens for
    down_proj's 1536 inputs, GPTQ fits the calibration set (error 25 vs RTN's 64) and loses on
    held-out tokens (75 vs 47); with every passage of the three sample languages (26 windows of
    128, 2.2 tokens per input) it is a tie there (68.0 vs 67.1 at 4 bits), so down_proj's
    held-out errors are printed, not asserted."""
    from benchmark_illusion.models.checkpoints import load_checkpoint

    model, tok = load_checkpoint(bundled_model_dir)
    for name in ("self_attn.q_proj", "mlp.down_proj"):
        x, lin = real_layer_inputs(model, tok, name, ("en", "de", "es"), 30)
        x_cal, x_held = x[: 26 * 128], x[26 * 128 :]
        hess = Hessian(lin.in_features, "cpu")
        hess.add(x_cal)
        w = lin.weight.detach()
        for bits in (4, 3):
            grid = Grid(bits=bits, group_size=128)
            for act_order in (False, True):
                q_gptq = gptq(w, hess.value, grid, act_order=act_order)
                for tokens, xx in (("calibration", x_cal), ("held-out", x_held)):
                    e_rtn = float(torch.linalg.norm(xx @ w.T - xx @ rtn(w, grid).T))
                    e_gptq = float(torch.linalg.norm(xx @ w.T - xx @ q_gptq.T))
                    print(name, bits, act_order, tokens, f"GPTQ {e_gptq:.1f} RTN {e_rtn:.1f}")
                    if tokens == "calibration" or name == "self_attn.q_proj":
                        assert e_gptq < e_rtn, (name, bits, act_order, tokens, e_gptq, e_rtn)
