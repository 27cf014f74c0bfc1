"""The smoke run's compressed checkpoints: pruned to their target (unstructured and 2:4) and
quantized on their grid, each evaluated; the one-thread steps reproduced at two threads; 8 bits
against held-out perplexity."""

from __future__ import annotations

import json

import duckdb
import polars as pl

from benchmark_illusion.evaluation.evaluate import LOG_SCHEMA
from e2e.common import (
    CHECKPOINTS,
    NM,
    QUANTIZED,
    SMOKE,
)
from smoke import ROOT


def test_every_checkpoint_is_pruned_to_target_and_evaluated(smoke_run):
    import json

    work, _ = smoke_run
    for method, s in CHECKPOINTS:
        ckpt = work / f"results/checkpoints/smollm2-135m/{method}/unstructured/{s}"
        report = json.loads((ckpt / "sparsity.json").read_text())
        assert abs(report["measured_sparsity"] - float(s)) <= 0.001, (method, s)
        assert all(abs(v["sparsity"] - float(s)) < 0.01 for v in report["layers"].values())
        assert len(report["layers"]) == 30 * 7  # every Linear of every block, lm_head excluded
        for lang in ("en", "es"):
            log = pl.read_parquet(
                work
                / (
                    f"results/generations/smollm2-135m/{method}/unstructured/"
                    f"{s}/sample/{lang}.parquet"
                )
            )
            assert dict(log.schema) == LOG_SCHEMA
            assert set(log["method"]) == {method} and set(log["sparsity"]) == {float(s)}
            assert set(log["structure"]) == {"unstructured"}
    # the first (only) replicate's windows: the smoke config's seed, 7
    cal = work / "results/calibration/smollm2-135m/s7.safetensors"
    from safetensors.torch import load_file

    assert tuple(load_file(str(cal))["input_ids"].shape) == (8, 64)


def test_every_2_of_4_checkpoint_has_its_pattern_on_disk_and_is_evaluated(smoke_run):
    """The smoke grid's 2:4 checkpoints read back from their safetensors: in every group of 4
    consecutive input weights of every pruned Linear at least 2 are zero (2 in all but a handful:
    the measured sparsity is 0.5), and magnitude's zeros are the 2 smallest |W| of the dense weight
    in the group (a per-group argsort, independent of pruning/masks.py; a mask of the 2 largest
    has the same zero count and fails here). Ties inside a group may break either way, so the
    pruned magnitudes are compared, not their positions."""
    import torch
    from safetensors.torch import load_file

    work, _ = smoke_run
    dense = load_file(str(work / "resources/models/smollm2-135m/model.safetensors"))
    for method, structure, s in NM:
        ckpt = work / f"results/checkpoints/smollm2-135m/{method}/{structure}/{s}"
        report = json.loads((ckpt / "sparsity.json").read_text())
        assert abs(report["measured_sparsity"] - 0.5) <= 0.001, (method, report)
        weights = load_file(str(ckpt / "model.safetensors"))
        pruned = [k for k in weights if ".layers." in k and k.endswith("proj.weight")]
        assert len(pruned) == 30 * 7  # every Linear of every block, lm_head excluded
        for name in pruned:
            w = weights[name].float()
            groups = w.reshape(w.shape[0], -1, 4)
            zero = groups == 0
            assert bool((zero.sum(dim=2) >= 2).all()), (method, name)
            if method == "magnitude":
                ref = dense[name].float().abs().reshape(groups.shape)
                two = torch.sort(ref, dim=2, stable=True).values[..., :2].sum(dim=2)
                assert torch.equal(torch.where(zero, ref, 0).sum(dim=2), two), name
        for name in set(weights) - set(pruned):  # embeddings, norms: untouched
            assert torch.equal(weights[name], dense[name]), (method, name)
        for lang in ("en", "es"):
            log = pl.read_parquet(
                work
                / f"results/generations/smollm2-135m/{method}/{structure}/{s}/sample/{lang}.parquet"
            )
            assert set(log["structure"]) == {"2:4"} and set(log["sparsity"]) == {0.5}


def same_but_last_bits(a: pl.DataFrame, b: pl.DataFrame, rtol: float = 1e-5) -> int:
    """Assert that two tables hold the same rows in the same order: every column exactly, but
    floats (and lists of floats) to `rtol`; return how many rows differ at all."""
    assert a.columns == b.columns and a.height == b.height
    differ = pl.Series("differ", [False] * a.height, dtype=pl.Boolean)
    for c in a.columns:
        x, y = a[c], b[c]
        inner = x.dtype.inner if isinstance(x.dtype, pl.List) else x.dtype
        if inner.is_float():
            flat = [(x.explode(), y.explode())] if isinstance(x.dtype, pl.List) else [(x, y)]
            for u, v in flat:
                assert u.is_null().equals(v.is_null()), c
                gap = (u - v).abs().fill_null(0.0)
                assert (gap <= rtol * v.abs().fill_null(0.0) + 1e-12).all(), (c, gap.max())
            if isinstance(x.dtype, pl.List):
                assert x.list.len().equals(y.list.len()), c
            differ = differ | ~x.eq_missing(y).fill_null(False)
        else:
            assert x.equals(y, check_names=False), c
    return int(differ.sum())


def test_one_thread_steps_agree_at_two_threads(smoke_run, tmp_path):
    """The steps that run one thread per job on a CPU (cluster.ONE_THREAD_ON_CPU), run again at
    two threads against what the smoke run's one-thread jobs wrote: a Wanda and an RTN
    checkpoint's weights bit for bit; evaluation rows (answers, judgements, option choices,
    gold ranks, beams and samples) exactly, their log-probs to 1e-5 relative; a benchmark's
    concept activations likewise. If this fails, the thread count of those jobs changes results
    on this machine, and the one-thread jobs are not the speed-up they were measured to be."""
    import re

    import torch
    from safetensors.torch import load_file

    from benchmark_illusion.compression.blockwise import decoder_layers
    from benchmark_illusion.compression.pruning.layerwise import PruneSettings, prune_model
    from benchmark_illusion.compression.quantization import QuantizeSettings, quantize_model
    from benchmark_illusion.concepts import steps as concept_steps
    from benchmark_illusion.config import params as rule_params
    from benchmark_illusion.config.validate import load_config
    from benchmark_illusion.evaluation.steps import EvalJob, evaluate_file
    from benchmark_illusion.models.checkpoints import load_checkpoint
    from benchmark_illusion.models.keys import CheckpointKey, Placement

    work, cfg = smoke_run
    config = load_config(cfg, root=ROOT)
    model = work / "resources/models/smollm2-135m"
    wanda = work / "results/checkpoints/smollm2-135m/wanda/unstructured/0.3"
    rtn = work / "results/checkpoints/smollm2-135m/rtn/int8-g128/0"
    for log in (
        "evaluate/smollm2-135m/wanda/unstructured/0.3/sample/es.log",
        "prune/smollm2-135m/wanda/unstructured/0.3.log",
    ):
        text = (work / "logs" / log).read_text()
        assert re.search(r"\(1 torch threads\)", text), log  # what the run's job used
    assert json.loads((wanda / "sparsity.json").read_text())["torch_threads"] == 1
    assert json.loads((rtn / "quantization.json").read_text())["torch_threads"] == 1
    # SparseGPT keeps up to 4 threads, capped at the smoke run's 2 cores (1 on the test cluster)
    sparsegpt = work / "results/checkpoints/smollm2-135m/sparsegpt/unstructured/0.3"
    threads = json.loads((sparsegpt / "sparsity.json").read_text())["torch_threads"]
    assert threads == (1 if SMOKE["slurm"] else 2)

    # Block i is compressed from the outputs of the compressed blocks before it, so a model cut
    # to its first 3 blocks, compressed at two threads, must reproduce the run's first 3 blocks.
    torch.set_num_threads(2)
    windows = load_file(str(work / "results/calibration/smollm2-135m/s7.safetensors"))["input_ids"]
    for ckpt, settings, step in (
        (
            wanda,
            PruneSettings.from_params(
                rule_params.prune(config, "smollm2-135m", "wanda"), "wanda", "unstructured", 0.3
            ),
            prune_model,
        ),
        (
            rtn,
            QuantizeSettings.from_params(
                rule_params.quantize(config, "smollm2-135m", "rtn"), "rtn", "int8-g128"
            ),
            quantize_model,
        ),
    ):
        net, _ = load_checkpoint(model)
        del decoder_layers(net)[3:]
        net.config.num_hidden_layers = 3
        step(net, windows, settings, progress=False)
        theirs = load_file(str(ckpt / "model.safetensors"))
        blocks = {k: v for k, v in net.state_dict().items() if ".layers." in k}
        assert len(blocks) == 3 * 9  # 7 Linears and 2 norms per block
        for k, v in blocks.items():
            assert torch.equal(v, theirs[k]), (ckpt, k)

    rows = evaluate_file(
        EvalJob(
            wanda,
            work / "results/selected/smollm2-135m/sample/es.parquet",
            tmp_path / "es.parquet",
            CheckpointKey(
                model="smollm2-135m", method="wanda", structure="unstructured", sparsity=0.3
            ),
            dataset="sample",
            lang="es",
            exemplars=work / "results/items/sample/es.parquet",
        ),
        rule_params.evaluation(config),
        Placement(threads=2),
    )
    assert torch.get_num_threads() == 2
    ran = pl.read_parquet(
        work / "results/generations/smollm2-135m/wanda/unstructured/0.3/sample/es.parquet"
    )
    assert set(rows["decode"]) == {"greedy", "loglik", "beam", "sample"}
    differ = same_but_last_bits(rows.drop("seconds"), ran.drop("seconds"))

    act = "results/concepts/smollm2-135m/activations/sample/es"
    concept_steps.concept_activations_file(
        work / "results/concepts/smollm2-135m/sae",
        model,
        work / "results/items/sample/es.parquet",
        tmp_path / "act.parquet",
        tmp_path / "act.tokens.parquet",
        rule_params.activations(config),
        model="smollm2-135m",
        dataset="sample",
        lang="es",
    )
    same_but_last_bits(
        pl.read_parquet(tmp_path / "act.tokens.parquet"),
        pl.read_parquet(work / f"{act}.tokens.parquet"),
    )
    differ_act = same_but_last_bits(
        pl.read_parquet(tmp_path / "act.parquet"), pl.read_parquet(work / f"{act}.parquet")
    )
    print(
        f"at two threads: {differ} of {rows.height} evaluation rows and {differ_act} activation "
        "rows differ in the last bits of a float; weights identical"
    )


def test_every_quantized_checkpoint_is_on_its_grid_evaluated_and_in_the_tables(smoke_run):
    import json

    work, _ = smoke_run
    for method, grid in QUANTIZED:
        ckpt = work / f"results/checkpoints/smollm2-135m/{method}/{grid}/0"
        report = json.loads((ckpt / "quantization.json").read_text())
        assert (report["bits"], report["group_size"], report["symmetric"]) == (8, 128, False)
        assert report["off_grid_groups"] == 0 and report["max_distinct_per_group"] <= 256
        assert len(report["layers"]) == 30 * 7  # every Linear of every block, lm_head excluded
        assert report["calibration_windows"] == (None if method == "rtn" else [8, 64])
        for lang in ("en", "es"):
            log = pl.read_parquet(
                work / f"results/generations/smollm2-135m/{method}/{grid}/0/sample/{lang}.parquet"
            )
            assert dict(log.schema) == LOG_SCHEMA
            assert set(log["method"]) == {method} and set(log["structure"]) == {grid}
            assert set(log["sparsity"]) == {0.0} and set(log["bits"]) == {8}
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    ck = con.execute(
        "SELECT method, family, bits, group_size, weight_bits FROM checkpoints "
        "WHERE family = 'quantization' ORDER BY method"
    ).fetchall()
    # docs/metrics.md's storage model: 8 bits per weight plus an fp16 scale and an 8-bit zero
    # point (asymmetric grid) per group of 128 input weights
    int8 = 8 + (16 + 8) / 128  # 8.1875
    assert ck == [("gptq", "quantization", 8, 128, int8), ("rtn", "quantization", 8, 128, int8)]
    for table in ("mc_only", "accuracy", "recovery", "oracle", "concept_damage", "chi_model"):
        got = con.execute(
            f"SELECT DISTINCT method, bits FROM {table} WHERE method IN ('rtn', 'gptq') ORDER BY 1"
        ).fetchall()
        # recovery has rows only where MC-only items were decoded (at 8 bits there may be none)
        full = [("gptq", 8), ("rtn", 8)]
        assert got == full if table != "recovery" else set(got) <= set(full), (table, got)
        cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
        assert cols[cols.index("sparsity") + 1] == "bits", table
    con.close()


def test_8_bit_changes_held_out_perplexity_by_under_one_percent(smoke_run):
    """The smoke run's 8-bit checkpoints (RTN, and GPTQ calibrated on en/es held-out passages):
    perplexity on the German sample passages, which no calibration saw, moves by less than 1 %
    against the dense model. RTN at 3 bits, quantized here, shows the measurement is not
    blind."""
    import json

    import torch

    from benchmark_illusion.compression.quantization import Grid, QuantizeSettings, quantize_model
    from benchmark_illusion.models.checkpoints import load_checkpoint

    work, _ = smoke_run
    dense, tok = load_checkpoint(work / "resources/models/smollm2-135m")
    text = " ".join(
        p["context"]
        for d in json.loads((ROOT / "resources/sample_qa/de.json").read_text())["data"]
        for p in d["paragraphs"]
    )
    ids = tok(text)["input_ids"]
    held = torch.tensor(ids[: 8 * 128]).view(8, 128)

    def perplexity(model) -> float:
        with torch.no_grad():
            return float(torch.exp(model(input_ids=held, labels=held, use_cache=False).loss))

    base = perplexity(dense)
    change = {}
    for method, grid in QUANTIZED:
        model, _ = load_checkpoint(work / f"results/checkpoints/smollm2-135m/{method}/{grid}/0")
        change[method] = perplexity(model) / base - 1
    quantize_model(dense, None, QuantizeSettings("rtn", Grid(3, 128)), progress=False)
    change["rtn 3-bit"] = perplexity(dense) / base - 1
    print(f"dense perplexity {base:.2f}; relative change {change}")
    assert abs(change["rtn"]) < 0.01 and abs(change["gptq"]) < 0.01, change
    assert change["rtn 3-bit"] > 0.1, change
