"""End to end on the real bundled model: snakemake download -> items -> dense evaluation ->
selection -> calibration -> magnitude/Wanda/SparseGPT at 30% sparsity -> evaluation of every
checkpoint -> DuckDB and figures, and the competency gaps (SAE -> labels -> concept activations
-> gap tables -> figures), then SQL on the result, the trained SAE checked independently,
re-runs after config changes, and jobs killed mid-run.

Where a SLURM cluster answers (or can be started: root, tests/slurm/start-cluster.sh; `.ci/run`
does so and sets BENCHMARK_ILLUSION_REQUIRE_SLURM=1), the smoke run goes through
`snakemake --profile tests/slurm/profile`: every job is an sbatch job, and one evaluate job is
cancelled while it runs, which the profile's retry must absorb. Elsewhere it runs locally and
the SLURM tests skip."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml

from benchmark_illusion.evaluation.evaluate import LOG_SCHEMA
from benchmark_illusion.metrics import dbfile
from conftest import swap_two_tokens
from dag import planned_jobs
from slurm.helpers import skip_reason, squeue_history
from smoke import ROOT, smoke_run_started, snakemake, snakemake_cmd

pytestmark = pytest.mark.e2e


SMOKE: dict = {}  # how the smoke run went: slurm (bool), output, cancelled job ids, seconds


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    # started in the background when the session started (conftest.py), or now
    run = smoke_run_started(tmp_path_factory)
    res = run.wait()
    SMOKE.update(
        slurm=run.slurm,
        out=res.stdout + res.stderr,
        cancelled=run.canceller.cancelled,
        seconds=run.seconds,
    )
    print(f"smoke run ({'SLURM' if run.slurm else 'local'}): {SMOKE['seconds']:.0f} s")
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    return run.work, run.cfg


GPU_RULES = {
    "evaluate_pool",
    "prune",
    "quantize",
    "evaluate",
    "sae",
    "concept_labels",
    "concept_activations",
}
CONCEPT_RULES = {
    "sae",
    "concept_labels",
    "concept_activations",
    "competency_gaps",
    "concept_figures",
}


def test_every_job_went_through_slurm_to_its_partition(smoke_run):
    import re

    if not SMOKE["slurm"]:
        pytest.skip(skip_reason())
    work, _ = smoke_run
    submitted = re.findall(
        r"has been submitted with SLURM jobid (\d+) \(log: .*?/rule_(\w+?)/", SMOKE["out"]
    )
    assert {rule for _, rule in submitted} == {
        "build_items",
        "import_model",
        "evaluate_pool",
        "select_items",
        "prune",
        "quantize",
        "evaluate",
        "aggregate",
        "figures",
    } | CONCEPT_RULES
    # 2 languages x (build, pool, select); import; one prune job per pruned checkpoint, one
    # quantize job per quantized one; every checkpoint (dense too) evaluated per language;
    # aggregate, figures; 6 concept jobs (1 + 1 + 2 + 1 + 1); and one more for the retried
    # evaluate job. The network rules ran where snakemake runs (local rules), none went to a
    # compute partition: the dataset downloads and the calibration text.
    n_checkpoints = 1 + N_PRUNED + len(QUANTIZED)
    assert len(submitted) == (2 * 3 + 1 + N_PRUNED + len(QUANTIZED) + 2 * n_checkpoints + 2 + 6 + 1)
    local = re.findall(r"^localrule (\w+):", SMOKE["out"], flags=re.M)
    assert {"download_dataset", "calibration_data"} <= set(local)
    history = {j["id"]: j for j in squeue_history()}
    for job_id, rule in submitted:
        job = history[job_id]  # slurmctld knows every job id the log names
        assert job["comment"].startswith(f"rule_{rule}"), (job, rule)
        assert job["partition"] == ("gpu" if rule in GPU_RULES else "main"), (job, rule)


def test_a_cancelled_job_is_retried_with_more_memory_and_time(smoke_run):
    import re

    if not SMOKE["slurm"]:
        pytest.skip(skip_reason())
    cancelled = SMOKE["cancelled"]
    assert len(cancelled) == 1, "no evaluate job was seen running"
    history = {j["id"]: j for j in squeue_history()}
    job = history[cancelled[0]]
    assert job["state"] == "CANCELLED"
    # the same rule and wildcards in the same run (the job name is the run's id)
    same = sorted(
        (
            j
            for j in history.values()
            if j["comment"] == job["comment"] and j["name"] == job["name"]
        ),
        key=lambda j: int(j["id"]),
    )
    assert [j["state"] for j in same] == ["CANCELLED", "COMPLETED"]
    assert "Trying to restart job" in SMOKE["out"]
    # the retry asked for twice the memory and time (attempt 2;
    # src/benchmark_illusion/scheduling/cluster.py):
    # every evaluate job of the one model asks the same at attempt 1, the retried one twice that
    asks = {
        (int(m), int(r))
        for block in re.split(r"\n(?:local)?rule ", SMOKE["out"])  # local jobs end a block too
        if block.startswith("evaluate:")
        for m, r in re.findall(r"mem_mb=(\d+),.*runtime=(\d+),", block)
    }
    (mem, minutes), (mem2, minutes2) = sorted(asks)
    assert mem2 == 2 * mem and minutes2 >= 2 * minutes - 1, asks


def test_every_step_produced_its_files(smoke_run):
    work, _ = smoke_run
    model = work / "resources/models/smollm2-135m"
    assert (model / "model.safetensors").is_file() and (model / "provenance.json").is_file()
    assert not list(model.glob("*.bin")), "weights must be stored as safetensors only"
    for lang in ("en", "es"):
        for path in (
            f"resources/datasets/sample/{lang}.parquet",
            f"results/items/sample/{lang}.parquet",
            f"results/items/sample/{lang}.report.json",
            f"results/pool/smollm2-135m/sample/{lang}.parquet",
            f"results/selected/smollm2-135m/sample/{lang}.parquet",
            f"results/generations/smollm2-135m/dense/none/0/sample/{lang}.parquet",
            f"logs/evaluate_pool/smollm2-135m/sample/{lang}.log",
        ):
            assert (work / path).is_file(), path
        for path in (
            f"results/concepts/smollm2-135m/activations/sample/{lang}.parquet",
            f"results/concepts/smollm2-135m/activations/sample/{lang}.tokens.parquet",
            f"logs/concept_activations/smollm2-135m/sample/{lang}.log",
        ):
            assert (work / path).is_file(), path
    for path in (
        "results/concepts/smollm2-135m/sae/sae/cfg.json",
        "results/concepts/smollm2-135m/sae/sae/sae_weights.safetensors",
        "results/concepts/smollm2-135m/sae/fit.json",
        "results/concepts/smollm2-135m/sae/corpus.parquet",
        "results/concepts/smollm2-135m/labels.parquet",
        "logs/sae/smollm2-135m.log",
        "results/metrics.duckdb",
        "logs/competency_gaps.log",
    ):
        assert (work / path).is_file(), path
    assert (work / "results/illusion.duckdb").is_file()
    # No temporary file survives a successful run.
    assert not [p for p in work.rglob("*.tmp")]


def test_logs_have_the_documented_schema_and_pool_size(smoke_run):
    work, _ = smoke_run
    df = pl.read_parquet(work / "results/pool/smollm2-135m/sample/en.parquet")
    assert dict(df.schema) == LOG_SCHEMA
    assert df["item_id"].n_unique() == 24  # pool_max caps the 43 English items
    assert sorted(df["format"].unique()) == ["candidates", "mc", "open"]
    assert df.group_by("item_id").len()["len"].to_list() == [3] * 24  # one row per item x format


def test_selected_items_are_right_in_open_and_mc_and_capped(smoke_run):
    work, _ = smoke_run
    pool = pl.read_parquet(work / "results/pool/smollm2-135m/sample/en.parquet")
    sel = pl.read_parquet(work / "results/selected/smollm2-135m/sample/en.parquet")
    assert 0 < sel.height <= 10
    ok = pool.filter(
        pl.col("item_id").is_in(sel["item_id"].implode()) & pl.col("format").is_in(["open", "mc"])
    )
    assert ok["correct"].all() and ok.height == 2 * sel.height
    gen = pl.read_parquet(work / "results/generations/smollm2-135m/dense/none/0/sample/en.parquet")
    assert set(gen["item_id"]) == set(sel["item_id"])


def test_duckdb_answers_sql_with_expected_columns_and_sane_values(smoke_run):
    work, _ = smoke_run
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    cols = [r[0] for r in con.execute("DESCRIBE accuracy").fetchall()]
    for c in (
        "model",
        "method",
        "structure",
        "sparsity",
        "dataset",
        "lang",
        "format",
        "n_items",
        "accuracy",
    ):
        assert c in cols
    rows = con.execute(
        "SELECT lang, format, n_items, accuracy FROM accuracy WHERE method = 'dense' ORDER BY 1, 2"
    ).fetchall()
    assert (
        con.execute(
            "SELECT count(DISTINCT (method, structure, sparsity)) FROM accuracy"
        ).fetchone()[0]
        == 1 + N_PRUNED + len(QUANTIZED)  # dense, 3 + 3 pruned, 2 quantized
    )
    by = {(lang, fmt): (n, acc) for lang, fmt, n, acc in rows}
    # Selected items are right in open and mc by construction; candidates is measured.
    assert by[("en", "open")][1] == 1.0 and by[("en", "mc")][1] == 1.0
    assert 0.0 <= by[("en", "candidates")][1] <= 1.0
    sel = con.execute("SELECT n_pool, n_selected FROM selection WHERE lang = 'en'").fetchone()
    assert sel[0] == 24 and 0 < sel[1] <= 10
    # With the answer prefix, the gold's first visible token is the model's top choice on the
    # items it answers (greedy wrote it).
    median_rank = con.execute(
        "SELECT median(gold_rank) FROM item_outcomes WHERE open_correct AND lang = 'en'"
    ).fetchone()[0]
    assert median_rank == 1


def test_instruments_rank_text_judge_strictly_and_draw_distractors_from_the_passage(smoke_run):
    """The measuring instruments on the real model's logs: the gold rank ranks a visible token, a
    candidates answer that names 2+ options is wrong, every option of a passage item is in its
    passage."""
    work, _ = smoke_run
    logs = pl.concat(
        [
            pl.read_parquet(p)
            for p in (work / "results").glob("**/*.parquet")
            if ("generations" in p.parts or "pool" in p.parts)
        ],
        how="vertical",
    )
    open_ = logs.filter((pl.col("format") == "open") & (pl.col("decode") == "greedy"))
    assert open_.height > 0 and open_["gold_token"].null_count() == 0
    assert open_.filter(pl.col("gold_token").str.strip_chars() == "").height == 0
    assert open_["gold_token_offset"].max() >= 1  # some golds start with a bare space (digits)
    assert open_["gold_logprob_answer"].null_count() == 0
    assert (open_["gold_logprob_answer"] < 0).all()
    cand = logs.filter(pl.col("format") == "candidates")
    assert cand["options_named"].null_count() == 0
    assert not cand.filter(pl.col("options_named") >= 2)["correct"].any()
    assert (cand.filter(pl.col("correct"))["options_named"] == 1).all()
    for lang in ("en", "es"):
        items = pl.read_parquet(work / f"results/items/sample/{lang}.parquet")
        assert items.height > 0
        for item in items.iter_rows(named=True):
            assert all(o in item["context"] for o in item["options"]), item["item_id"]
            assert set(item["distractor_sources"]) <= {"answer", "span"}
            assert item["distractors_in_passage"]
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    bias = con.execute(
        "SELECT format, sum(n_chosen), max(n_items) FROM position_bias WHERE lang = 'all' "
        "AND method = 'dense' GROUP BY format ORDER BY format"
    ).fetchall()
    assert [b[0] for b in bias] == ["candidates", "mc"] and all(b[1] == b[2] for b in bias)


def test_the_judge_reads_the_real_models_answers_and_the_options_are_answers(smoke_run):
    """On the real model's logs: the judge's statuses and bounds are logged and consistent (a
    negated or uncertain answer is never correct, the upper bound never below the verdict), each
    row re-judged from its output gives its logged verdicts, no span option starts or ends with
    a function word, and the database carries the options' table and the MC-only bounds."""
    from benchmark_illusion.evaluation.decoding import judge_row
    from benchmark_illusion.evaluation.language import function_edge
    from benchmark_illusion.evaluation.settings import EvalSettings

    work, _ = smoke_run
    gen = pl.concat(
        [pl.read_parquet(p) for p in (work / "results/generations").glob("**/*.parquet")],
        how="diagonal_relaxed",
    ).filter(pl.col("format").is_in(["open", "oneshot"]))
    assert gen.height > 0
    for col in ("negated", "uncertain", "correct_upper", "correct_sentence_upper", "match"):
        assert col in gen.columns
    assert gen["negated"].null_count() == 0 and gen["uncertain"].null_count() == 0
    assert not gen.filter(pl.col("negated") | pl.col("uncertain"))["correct_sentence"].any()
    assert not gen.filter(pl.col("correct") & ~pl.col("correct_upper")).height
    assert not gen.filter(pl.col("correct_sentence") & ~pl.col("correct_sentence_upper")).height
    items = {
        r["item_id"]: r
        for lang in ("en", "es")
        for r in pl.read_parquet(work / f"results/items/sample/{lang}.parquet").iter_rows(
            named=True
        )
    }
    sample = gen.filter(pl.col("format") == "open").head(60)
    for r in sample.iter_rows(named=True):
        again = judge_row(r["output"], items[r["item_id"]], EvalSettings())
        for col in ("correct", "correct_sentence", "negated", "uncertain", "option_correct"):
            assert again[col] == r[col], (r["item_id"], r["output"], col)
    for item in items.values():
        gold = item["options"][item["gold_option"]]
        spans = [
            d
            for d, src in zip(
                [o for o in item["options"] if o != gold], item["distractor_sources"], strict=True
            )
            if src == "span"
        ]
        assert not [d for d in spans if function_edge(d, item["lang"])], item["item_id"]
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    spans_with_edges = con.execute(
        "SELECT sum(n_options), sum(n_function_edge) FROM option_quality WHERE source = 'span'"
    ).fetchone()
    assert spans_with_edges[0] > 0 and spans_with_edges[1] == 0
    bounds = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE mc_only_lower <= mc_only_rate "
        "AND mc_only_sentence_lower <= mc_only_sentence_rate) FROM mc_only"
    ).fetchone()
    assert bounds[0] > 0 and bounds[0] == bounds[1]


CHECKPOINTS = [(m, "0.3") for m in ("magnitude", "wanda", "sparsegpt")]  # unstructured
NM = [(m, "2of4", "0.5") for m in ("magnitude", "wanda", "sparsegpt")]  # 2:4 prunes 2/4 = 50%
N_PRUNED = len(CHECKPOINTS) + len(NM)
QUANTIZED = [("rtn", "int8-g128"), ("gptq", "int8-g128")]


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

    from benchmark_illusion import pipeline
    from benchmark_illusion.compression.pruning.layerwise import decoder_layers, prune_model
    from benchmark_illusion.compression.quantization import quantize_model
    from benchmark_illusion.concepts import activations as concepts
    from benchmark_illusion.config import params as rule_params
    from benchmark_illusion.config.validate import load_config
    from benchmark_illusion.models.checkpoints import load_checkpoint

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
            pipeline.prune_settings(
                rule_params.prune(config, "smollm2-135m", "wanda"), "wanda", "unstructured", 0.3
            ),
            prune_model,
        ),
        (
            rtn,
            pipeline.quantize_settings(
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

    rows = pipeline.evaluate_file(
        wanda,
        work / "results/selected/smollm2-135m/sample/es.parquet",
        tmp_path / "es.parquet",
        rule_params.evaluation(config),
        method="wanda",
        structure="unstructured",
        sparsity=0.3,
        dataset="sample",
        lang="es",
        exemplar_items=work / "results/items/sample/es.parquet",
        model="smollm2-135m",
        threads=2,
    )
    assert torch.get_num_threads() == 2
    ran = pl.read_parquet(
        work / "results/generations/smollm2-135m/wanda/unstructured/0.3/sample/es.parquet"
    )
    assert set(rows["decode"]) == {"greedy", "loglik", "beam", "sample"}
    differ = same_but_last_bits(rows.drop("seconds"), ran.drop("seconds"))

    act = "results/concepts/smollm2-135m/activations/sample/es"
    concepts.concept_activations_file(
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

    import duckdb

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


def test_duckdb_counts_mc_only_items_per_checkpoint(smoke_run):
    work, _ = smoke_run
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT method, sparsity, lang, n_items, n_mc_only, mc_only_rate FROM mc_only "
        "WHERE lang <> 'all'"
    ).fetchall()
    seen = {(m, f"{s:g}") for m, s, *_ in rows}
    quantized = {(m, "0") for m, _ in QUANTIZED}
    nm = {(m, s) for m, _, s in NM}
    assert seen == {(m, s) for m, s in CHECKPOINTS} | nm | {("dense", "0")} | quantized
    for method, _s, _lang, n, n_mc_only, rate in rows:
        assert 0 <= n_mc_only <= n and (n == 0 or rate == pytest.approx(n_mc_only / n))
        if method == "dense":
            # selected items are right in the dense model's open and mc answers, and evaluating the
            # dense model again (fp32 on CPU, other batches) reproduces them: a noise floor of 0
            assert n_mc_only == 0
    # The item-level table says which items pruning turned from correct to MC-only.
    n_items = con.execute(
        "SELECT count(*) FROM item_outcomes WHERE mc_only AND method <> 'dense'"
    ).fetchone()[0]
    assert n_items == sum(r[4] for r in rows if r[0] != "dense")
    # Recovery decodes ran on every selected item of every checkpoint (scope all), dense included,
    # and every item got a status.
    assert (
        con.execute("SELECT count(*) FROM item_outcomes WHERE recovered IS NULL").fetchone()[0] == 0
    )
    assert (
        con.execute("SELECT count(*) FROM item_outcomes WHERE method = 'dense'").fetchone()[0] > 0
    )
    assert con.execute("SELECT count(*) FROM item_outcomes WHERE status IS NULL").fetchone()[0] == 0


def test_controls_budget_noise_floor_false_recovery_chance_and_oracle(smoke_run):
    """Every headline number has its control on the real model's run."""
    work, _ = smoke_run
    logs = pl.concat(
        [pl.read_parquet(p) for p in (work / "results/generations").glob("**/*.parquet")]
    )
    items = pl.concat(
        [pl.read_parquet(work / f"results/items/sample/{lang}.parquet") for lang in ("en", "es")]
    )
    # budgets: greedy 12, recovery floor 8 raised to 12; every gold fits with the margin of 4
    gen = logs.filter(~pl.col("format").is_in(["mc", "mc_nopassage"]))
    assert gen["max_new_tokens"].null_count() == 0 and gen["max_new_tokens"].min() == 12
    assert gen.filter(pl.col("decode") != "greedy")["max_new_tokens"].min() == 12
    assert (gen["n_output_tokens"] <= gen["max_new_tokens"]).all()
    # the decoy: every open-format row judged against the option after the gold
    opened = logs.filter(pl.col("format").is_in(["open", "oneshot"]))
    assert opened["decoy_correct"].null_count() == 0
    assert (opened["decoy_option"] == (opened["gold_option"] + 1) % 4).all()
    # every option judged as the gold on those rows (false recovery against every distractor);
    # the decoy's verdict is one of them
    assert (opened["option_correct"].list.len() == 4).all()
    assert (
        opened["option_correct"].list.get(opened["decoy_option"]) == opened["decoy_correct"]
    ).all()
    # the sentence-tolerant verdict only adds answers: correct implies correct_sentence
    gen_rows = logs.filter(pl.col("format").is_in(["open", "oneshot", "candidates"]))
    assert gen_rows["correct_sentence"].null_count() == 0
    assert not (gen_rows["correct"] & ~gen_rows["correct_sentence"]).any()
    assert items.height > 0
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    # the dense model went through `evaluate` like the checkpoints: its floor is 0 in fp32 on CPU
    floor = con.execute("SELECT DISTINCT noise_floor FROM mc_only").fetchall()
    assert floor == [(0.0,)]
    assert con.execute(
        "SELECT max(abs(drop)) FROM support_gradient WHERE method = 'dense'"
    ).fetchone() == (0.0,)
    assert con.execute(
        "SELECT count(*) FROM support_gradient WHERE noise_floor IS NULL"
    ).fetchone() == (0,)
    # chance: K = 4 options; adjusted accuracy and MC-only rate by their formulas
    for acc, chance, adj in con.execute(
        "SELECT accuracy, chance, accuracy_chance_adj FROM accuracy WHERE format = 'mc'"
    ).fetchall():
        assert chance == 0.25 and adj == pytest.approx((acc - 0.25) / 0.75)
    for rate, adj, open_acc in con.execute(
        "SELECT m.mc_only_rate, m.mc_only_guess_adj, a.accuracy FROM mc_only m JOIN accuracy a "
        "USING (model, method, structure, sparsity, dataset, lang) WHERE a.format = 'open'"
    ).fetchall():
        assert adj == pytest.approx(rate - (1 - open_acc) / 4)
    # false recovery beside every recovery rate (any distractor; the mean over distractors is at
    # most that), and the corrected rate
    for rate, false, mean, corrected in con.execute(
        "SELECT rate, false_recovery_rate, false_recovery_mean, corrected_rate FROM recovery"
    ).fetchall():
        assert false is not None and corrected == pytest.approx(rate - false)
        assert mean <= false + 1e-12
    # the MC-only items split into verbose / demoted / erased / untested; scope all decodes every
    # item, so none is untested
    for n, v, d, e, u, rate, parts in con.execute(
        "SELECT n_mc_only, n_mc_only_verbose, n_mc_only_demoted, n_mc_only_erased, "
        "n_mc_only_untested, mc_only_rate, mc_only_verbose_rate + mc_only_demoted_rate "
        "+ mc_only_erased_rate + mc_only_untested_rate FROM mc_only"
    ).fetchall():
        assert v + d + e + u == n and u == 0 and parts == pytest.approx(rate)
    # the oracle table is complete (scope all), dense included, with drops for the pruned rows
    oracle = con.execute(
        "SELECT method, bool_and(complete), count(*) FILTER (WHERE drop IS NULL) FROM oracle "
        "GROUP BY method ORDER BY method"
    ).fetchall()
    assert [o[0] for o in oracle] == ["dense", "gptq", "magnitude", "rtn", "sparsegpt", "wanda"]
    assert all(o[1] for o in oracle)
    assert oracle[0][2] > 0 and all(o[2] == 0 for o in oracle[1:])
    # greedy <= oracle everywhere
    assert con.execute("""SELECT count(*) FROM oracle g JOIN oracle o
                          USING (model, method, structure, sparsity, dataset, lang)
                          WHERE g.decode = 'greedy' AND o.decode = 'oracle' \
AND o.accuracy < g.accuracy""").fetchone() == (0,)


def test_headline_numbers_recomputed_from_the_parquet_logs_with_polars(smoke_run):
    """A second implementation, without the SQL: accuracy per format, MC-only rate, Delta_PR,
    demoted and erased counts and oracle accuracy per checkpoint and language equal the tables."""
    work, _ = smoke_run
    logs = pl.concat(
        [pl.read_parquet(p) for p in (work / "results/generations").glob("**/*.parquet")]
    )
    key = ["method", "sparsity", "lang", "item_id"]
    first = logs.filter(pl.col("sample") == 0)

    def correct(fmt, decode, column="correct", name=None):
        return first.filter((pl.col("format") == fmt) & (pl.col("decode") == decode)).select(
            *key, pl.col(column).alias(name or fmt)
        )

    decoded = (
        logs.filter(pl.col("decode").is_in(["beam", "sample"]) | (pl.col("format") == "oneshot"))
        .group_by(key)
        .agg(
            pl.col("correct").any().alias("recovered"),
            pl.col("correct_sentence").any().alias("recovered_sentence"),
        )
    )
    per_item = (
        correct("open", "greedy")
        .join(correct("open", "greedy", "correct_sentence", "open_sentence"), on=key)
        .join(correct("candidates", "greedy"), on=key)
        .join(correct("mc", "loglik"), on=key)
        .join(decoded, on=key, how="left")
    )
    # status: correct, else verbose (a sentence states the gold), else demoted (a decode produces
    # it, sentence-tolerant), erased (decoded, never produced) or untested (no decode ran)
    lost = ~pl.col("open") & ~pl.col("open_sentence")
    per_item = per_item.with_columns(
        (pl.col("mc") & ~pl.col("open")).alias("mc_only"),
        (lost & pl.col("recovered_sentence").fill_null(False)).alias("demoted"),
        (lost & pl.col("recovered_sentence").is_not_null() & ~pl.col("recovered_sentence"))
        .fill_null(False)
        .alias("erased"),
        (pl.col("open") | pl.col("recovered").fill_null(False)).alias("oracle"),
    )
    want = per_item.group_by("method", "sparsity", "lang").agg(
        pl.len().alias("n"),
        pl.col("open").mean(),
        pl.col("candidates").mean(),
        pl.col("mc").mean(),
        pl.col("mc_only").mean(),
        (pl.col("candidates").cast(pl.Float64) - pl.col("open").cast(pl.Float64))
        .mean()
        .alias("delta_pr"),
        pl.col("demoted").sum(),
        pl.col("erased").sum(),
        pl.col("oracle").mean(),
    )
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    got = con.execute("""
        SELECT m.method, m.sparsity, m.lang, m.n_items, o.accuracy, c.accuracy, mc.accuracy, \
m.mc_only_rate,
               d.delta_pr, m.n_demoted, m.n_erased, orc.accuracy
        FROM mc_only m
        JOIN accuracy o USING (model, method, structure, sparsity, dataset, lang)
        JOIN accuracy c USING (model, method, structure, sparsity, dataset, lang)
        JOIN accuracy mc USING (model, method, structure, sparsity, dataset, lang)
        JOIN delta_pr d USING (model, method, structure, sparsity, dataset, lang)
        JOIN oracle orc USING (model, method, structure, sparsity, dataset, lang)
        WHERE o.format = 'open' AND c.format = 'candidates' AND mc.format = 'mc' \
AND orc.decode = 'oracle'
          AND m.lang <> 'all'""").fetchall()
    assert len(got) == want.height == 2 * (1 + N_PRUNED + len(QUANTIZED))
    table = {(r[0], r[1], r[2]): r[3:] for r in got}
    for w in want.iter_rows(named=True):
        g = table[(w["method"], w["sparsity"], w["lang"])]
        assert g == (
            w["n"],
            pytest.approx(w["open"]),
            pytest.approx(w["candidates"]),
            pytest.approx(w["mc"]),
            pytest.approx(w["mc_only"]),
            pytest.approx(w["delta_pr"]),
            w["demoted"],
            w["erased"],
            pytest.approx(w["oracle"]),
        ), w


def test_bfloat16_on_cpu_runs_and_reports_a_noise_floor(smoke_run, tmp_path):
    """evaluation.dtype bfloat16: the dense model evaluated twice (pool, then the selected items in
    other batches) may disagree with itself; the floor is reported, whatever its value."""

    work, cfg = smoke_run
    bf = tmp_path / "bf16"
    for sub in ("resources",):  # the imported model and the downloaded data: no re-import
        shutil.copytree(work / sub, bf / sub)
    c = yaml.safe_load(cfg.read_text())
    c["datasets"]["sample"]["languages"] = ["en"]
    c["calibration"]["languages"] = ["en"]
    c["items"] = {"pool_max": 12, "max_per_language": 8}
    c["evaluation"].update(dtype="bfloat16", formats=["open", "mc"])
    c["evaluation"]["recovery"] = {"beam": False, "sample": False, "oneshot": False}
    c["pruning"]["methods"] = []
    c["quantization"]["methods"] = []  # the dense model only: its floor is what is tested
    c["concepts"] = {"enabled": False}
    path = bf / "bf16.yaml"
    path.write_text(yaml.safe_dump(c))
    res = snakemake(bf, path)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    con = duckdb.connect(
        str(bf / "results/illusion.duckdb"), read_only=True
    )  # concepts off: one database
    floor = con.execute(
        "SELECT n_items, mc_only_rate, noise_floor FROM mc_only WHERE method = 'dense' "
        "AND lang = 'en'"
    ).fetchone()
    # the floor recomputed from the dense model's bfloat16 log: the selected items whose mc pick
    # is right and whose greedy open answer is wrong (its definition, docs/metrics.md)
    log = pl.read_parquet(bf / "results/generations/smollm2-135m/dense/none/0/sample/en.parquet")
    right = {
        fmt: set(log.filter((pl.col("format") == fmt) & pl.col("correct"))["item_id"])
        for fmt in ("open", "mc")
    }
    n_items = log.filter(pl.col("format") == "mc")["item_id"].n_unique()
    assert floor[0] == n_items > 0
    assert floor[2] == pytest.approx(len(right["mc"] - right["open"]) / n_items)
    drops = con.execute(
        "SELECT format, drop FROM support_gradient WHERE method = 'dense' AND lang = 'en'"
    ).fetchall()
    assert {f for f, _ in drops} == {"open", "mc", "mc_norm", "mc_bytes"} and all(
        d is not None for _, d in drops
    )
    print(
        f"bfloat16 noise floor on CPU: MC-only {floor[2]:.3f} over {floor[0]} items; drops {drops}"
    )


def test_letters_style_names_candidates_by_letter_and_changes_no_other_row(smoke_run, tmp_path):
    """prompt.candidates_style letters on a copy of the smoke run: the dense model's English
    evaluate job re-run alone (--rerun-triggers mtime keeps the pool and the selection; recovery
    decodes off). The open and mc rows are the smoke run's own (their prompts do not show the
    options' style); the candidates prompts differ from the bullets ones, and an answer that is a
    bare letter ("B", "B.", "(B)") picks that option: checked with a regex of its own, not the
    judge's, on every such row."""
    import re

    work, cfg = smoke_run
    copy = tmp_path / "copy"
    link_copy(work, copy)
    c = yaml.safe_load(cfg.read_text())
    c["prompt"] = {"candidates_style": "letters"}
    c["evaluation"]["recovery"] = {"beam": False, "sample": False, "oneshot": False}
    path = tmp_path / "letters.yaml"
    path.write_text(yaml.safe_dump(c))
    target = "results/generations/smollm2-135m/dense/none/0/sample/en.parquet"
    res = snakemake(copy, path, "--rerun-triggers", "mtime", "--forcerun", target, "--", target)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert planned_jobs(res.stdout + res.stderr) == {"evaluate": 1}
    letters, bullets = (
        pl.read_parquet(folder / target).filter(pl.col("decode").is_in(["greedy", "loglik"]))
        for folder in (copy, work)
    )
    keep = ["item_id", "format", "output", "correct", "pred_option", "option_ll", "prompt_id"]
    for fmt in ("open", "mc"):
        a, b = (
            x.filter(pl.col("format") == fmt).sort("item_id").select(keep)
            for x in (letters, bullets)
        )
        assert a.height > 0 and a.equals(b), fmt
    cand, cand_bullets = (
        x.filter(pl.col("format") == "candidates").sort("item_id") for x in (letters, bullets)
    )
    assert cand["item_id"].to_list() == cand_bullets["item_id"].to_list()
    assert not set(cand["prompt_id"]) & set(cand_bullets["prompt_id"])
    bare = re.compile(r"^\s*\(?([A-D])\)?\.?\s*$")
    named = 0
    for row in cand.iter_rows(named=True):
        m = bare.match(row["output"].split("\n")[0])
        if m:
            named += 1
            k = "ABCD".index(m.group(1))
            assert row["pred_option"] == k and row["correct"] == (k == row["gold_option"]), row
    print(f"letters: {named} of {cand.height} candidates answers are a bare letter")


def test_cli_prints_a_query_result(smoke_run):
    work, _ = smoke_run
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark_illusion",
            "--db",
            str(work / "results/illusion.duckdb"),
            "sql",
            "--csv",
            "SELECT lang, format, accuracy FROM accuracy "
            "WHERE format IN ('open', 'candidates', 'mc') AND lang <> 'all' ORDER BY 1, 2",
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    n_checkpoints = 1 + N_PRUNED + len(QUANTIZED)
    assert lines[0] == "lang,format,accuracy" and len(lines) == 1 + 2 * 3 * n_checkpoints


def test_estimate_plans_the_smoke_runs_jobs_from_a_few_timed_items(smoke_run):
    """`estimate` on the smoke config, run where the smoke run ran (its imported model and
    items): per timed rule, the jobs it plans are the jobs the run had; the estimated and the
    measured run times are printed (how far off the estimate was goes in the notes)."""
    work, cfg = smoke_run
    res = subprocess.run(
        [sys.executable, "-m", "benchmark_illusion", "estimate", "--configfile", str(cfg)]
        + ["--items", "2"],
        capture_output=True,
        text=True,
        cwd=work,
        timeout=1800,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in ("evaluate_pool", "prune", "quantize", "evaluate", "total"):
            rows[parts[0]] = parts
    planned = planned_jobs(SMOKE["out"])
    for rule in ("evaluate_pool", "prune", "quantize", "evaluate"):
        assert int(rows[rule][1]) == planned[rule], (rule, res.stdout)
    pools = sum(
        min(24, pl.read_parquet(work / f"results/items/sample/{lang}.parquet").height)
        for lang in ("en", "es")
    )
    assert int(rows["evaluate_pool"][2]) == pools
    print(res.stdout)
    print(f"measured smoke run: {SMOKE['seconds']:.0f} s (every rule, SLURM: {SMOKE['slurm']})")


METRIC_TABLES = (
    "accuracy",
    "support_gradient",
    "delta_pr",
    "mc_only",
    "recovery",
    "oracle",
    "gold_rank",
    "gold_rank_cdf",
    "position_bias",
    "accuracy_by_distractor_source",
    "selection",
    "item_outcomes",
    "rates",
    "item_values",
    "bootstrap_units",
    "bootstrap_weights",
)
FIGURES = (
    "accuracy_vs_sparsity",
    "mc_only_by_language",
    "gold_rank_cdf",
    "recovery_by_decode",
    "position_bias",
    "oracle_vs_sparsity",
    "concept_coverage",
    "concept_extremes",
    "concept_damage",
)


def test_every_metric_table_is_non_empty_with_intervals(smoke_run):
    work, _ = smoke_run
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    for table in METRIC_TABLES:
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
    # every rate has an interval around it, and pooled rows exist for every checkpoint
    assert con.execute(
        "SELECT count(*) FROM rates WHERE ci_low IS NULL OR NOT (ci_low <= value + 1e-9 "
        "AND value <= ci_high + 1e-9)"
    ).fetchone() == (0,)
    assert con.execute(
        "SELECT count(DISTINCT (method, structure, sparsity)) FROM mc_only WHERE lang = 'all'"
    ).fetchone() == (1 + N_PRUNED + len(QUANTIZED),)
    # the support gradient covers every checkpoint x language x format (open, candidates, and the
    # three MC scorings: mc, mc_norm, mc_bytes; the dense row: the noise floor)
    assert con.execute("SELECT count(*) FROM support_gradient WHERE lang <> 'all'").fetchone() == (
        (1 + N_PRUNED + len(QUANTIZED)) * 2 * 5,
    )
    # the recovery table reports every decode of the smoke config plus the oracle
    decodes = {r[0] for r in con.execute("SELECT DISTINCT decode FROM recovery").fetchall()}
    assert decodes == {
        "beam_top",
        "beam_any",
        "sample_pass",
        "sample_majority",
        "oneshot",
        "oracle",
    }


CONCEPT_TABLES = (
    "concept_activations",
    "concept_tokens",
    "concept_labels",
    "concept_benchmarks",
    "chi_bench",
    "coverage_gaps",
    "concept_scores",
    "chi_model",
    "model_gaps",
    "concept_damage",
    "concept_stability",
)


def test_every_concept_table_is_non_empty_and_complete(smoke_run):
    work, _ = smoke_run
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    for table in CONCEPT_TABLES:
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
    width = 1024
    # every latent has a label row; chi_bench has every latent x (2 benchmarks + across)
    assert con.execute("SELECT count(*) FROM concept_labels").fetchone() == (width,)
    assert con.execute("SELECT count(*) FROM chi_bench").fetchone() == (3 * width,)
    # every candidate item of both benchmarks has a token count and at least one active concept
    items = {
        lang: pl.read_parquet(work / f"results/items/sample/{lang}.parquet").height
        for lang in ("en", "es")
    }
    got = dict(con.execute("SELECT lang, n_items FROM concept_benchmarks").fetchall())
    assert got == items
    assert con.execute("SELECT count(DISTINCT item_id) FROM concept_activations").fetchone() == (
        sum(items.values()),
    )
    # chi_model for every checkpoint x format (the three formats and the sentence-tolerant verdict
    # of the two generated ones), per language and pooled; damage for every pruned checkpoint
    formats = {r[0] for r in con.execute("SELECT DISTINCT format FROM chi_model").fetchall()}
    assert formats == {"open", "candidates", "mc", "open_sentence", "candidates_sentence"}
    ckpts = con.execute("""SELECT count(DISTINCT (method, sparsity, format, lang)) FROM chi_model
                           WHERE population = 'selected'""").fetchone()[0]
    assert ckpts == (1 + N_PRUNED + len(QUANTIZED)) * len(formats) * 3
    assert con.execute(
        "SELECT count(DISTINCT (method, sparsity)) FROM concept_damage"
    ).fetchone() == (N_PRUNED + len(QUANTIZED),)
    assert (
        con.execute("SELECT count(*) FROM model_gaps WHERE population = 'pool'").fetchone()[0] > 0
    )
    # the gap classes exist, and a concept's class agrees with its chi_bench and the thresholds
    classes = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT coverage FROM chi_bench WHERE lang <> 'all'"
        ).fetchall()
    }
    assert {"under", "over", "typical"} <= classes
    assert con.execute("""SELECT count(*) FROM chi_bench \
WHERE (coverage = 'under' AND chi_bench > under_threshold)
                          OR (coverage = 'over' AND chi_bench < over_threshold)
                          OR (coverage = 'missing' AND n_active > 0)""").fetchone() == (0,)
    # labels: a label and examples with the marked token for every latent that fires
    lab = con.execute("""SELECT count(*) FILTER (WHERE label IS NULL OR len(examples) = 0),
                                count(*) FILTER (WHERE NOT contains(examples[1].context, '[[')) \
FROM concept_labels
                         WHERE n_fired > 0""").fetchone()
    assert lab == (0, 0)


def test_concept_stability_on_80_percent_subsamples(smoke_run):
    """chi_bench and chi_model recomputed on 3 seeded subsamples keeping 80% of each benchmark's
    items."""
    work, _ = smoke_run
    con = duckdb.connect(str(work / "results/illusion.duckdb"), read_only=True)
    rows = {
        (r[0], r[1]): r[2:]
        for r in con.execute(
            """SELECT metric, scope, n_values, median_abs_change, p90_abs_change, \
median_rel_change, median_spearman
           FROM concept_stability WHERE fraction = 0.8 AND repeats = 3"""
        ).fetchall()
    }
    for (metric, scope), (n, mabs, p90, mrel, rho) in sorted(rows.items()):
        print(
            f"stability {metric:9s} {scope:9s}: n={n} median |change| {mabs:.3f} (p90 {p90:.3f}), "
            f"median relative {mrel:.3f}, median Spearman {rho:.3f}"
        )
    assert set(rows) == {
        ("chi_bench", "benchmark"),
        ("chi_bench", "all"),
        ("chi_model", "benchmark"),
        ("chi_model", "all"),
    }
    # coverage: the ranking of concepts barely moves and values move by a few percent
    for scope in ("benchmark", "all"):
        n, mabs, p90, mrel, rho = rows[("chi_bench", scope)]
        assert rho > 0.95 and mrel < 0.2, rows[("chi_bench", scope)]
    # performance on <= 10 selected items per language is noisier, but still ordered alike
    n, mabs, p90, mrel, rho = rows[("chi_model", "all")]
    assert rho > 0.6 and mabs < 0.15, rows[("chi_model", "all")]


def test_smoke_sae_reaches_the_floor_beats_pca_and_reloads_identically(smoke_run):
    """Recomputed here from the SAE folder and the corpus it stored, not taken from fit.json."""
    import math

    import torch

    from benchmark_illusion.concepts import activations as C
    from benchmark_illusion.concepts import residual, sae_train
    from benchmark_illusion.concepts import sae as S
    from benchmark_illusion.evaluation.engine import pad_id
    from benchmark_illusion.evaluation.prompts import PromptSettings
    from benchmark_illusion.models.checkpoints import load_checkpoint

    work, _ = smoke_run
    out = work / "results/concepts/smollm2-135m/sae"
    sae = S.open_sae(out)
    assert isinstance(sae, S.SparseAutoencoder) and sae.hook_name == "blocks.15.hook_resid_post"
    corpus = pl.read_parquet(out / "corpus.parquet")
    assert set(corpus["source"]) == {"items", "calibration"}
    model, tok = load_checkpoint(work / "resources/models/smollm2-135m")
    reader = residual.ResidualReader(model, sae.hook_name)

    def acts(split, n=None):
        seqs = [list(x) for x in corpus.filter(pl.col("split") == split)["input_ids"].to_list()][:n]
        return residual.read_activations(
            reader, seqs, batch_size=8, pad_id=pad_id(tok), norm_threshold=sae.norm_threshold
        )

    # PCA is fitted on 30 training sequences (~6k positions, ten per dimension): enough for a
    # 576-wide covariance, and half the reading time of the whole training split
    train, held = acts("train", 30), acts("heldout")
    # the extreme-norm first position of every sequence is cut
    assert (
        math.isfinite(sae.norm_threshold)
        and held.n_excluded >= (corpus["split"] == "heldout").sum()
    )
    fit = sae_train.fit_stats(sae, held.acts)
    pca = sae_train.pca_fve(train.acts, held.acts, 32)
    stored = json.loads((out / "fit.json").read_text())
    print(
        f"smoke SAE (1024 latents, k=32, layer 15): held-out FVE {fit['fve']:.3f}, "
        f"L0 {fit['l0']:.1f}, dead {fit['dead_fraction']:.4f}; "
        f"PCA with 32 components {pca:.3f}; trained in {stored['seconds']} s"
    )
    assert fit["fve"] >= 0.6 and fit["fve"] > pca + 0.1 and fit["l0"] <= 32
    assert fit["fve"] == pytest.approx(stored["fve"], abs=1e-4)
    again = S.load_sae(out / "sae")
    assert torch.equal(again.encode(held.acts[:500]), sae.encode(held.acts[:500]))
    # a_c(x) of one item, by the definition: mean over its passage + question tokens
    item = pl.read_parquet(work / "results/items/sample/es.parquet").row(0, named=True)
    ids, keep = C.item_prompt(tok, PromptSettings(), item, "content")
    h = reader(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))[0]
    mask = torch.tensor(keep) & (h.norm(dim=-1) <= sae.norm_threshold)
    expected = sae.encode(h[mask]).mean(0)
    stored_rows = pl.read_parquet(
        work / "results/concepts/smollm2-135m/activations/sample/es.parquet"
    ).filter(pl.col("item_id") == item["item_id"])
    got = torch.zeros(sae.d_sae)
    got[stored_rows["concept"].to_list()] = torch.tensor(stored_rows["activation"].to_list())
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_pretrained_source_loads_a_saelens_folder(smoke_run, tmp_path):
    """models.<name>.sae.path: a folder in SAELens' format, read by SAELens, checked and written
    back."""
    import torch
    from sae_lens import SAE

    from benchmark_illusion.concepts.sae import open_sae
    from benchmark_illusion.concepts.sae_build import build_sae
    from benchmark_illusion.config import params as rule_params
    from benchmark_illusion.config.validate import load_config

    work, cfg = smoke_run
    src = work / "results/concepts/smollm2-135m/sae"
    SAE.load_from_disk(str(src / "sae")).save_model(tmp_path / "published")
    config = load_config(cfg, root=ROOT)
    config["models"]["smollm2-135m"]["sae"] = {"path": str(tmp_path / "published")}
    config["concepts"]["sae"].update(corpus=["items"], max_tokens=4000)
    params = rule_params.sae(config, "smollm2-135m")  # what the sae rule passes
    got = build_sae(
        work / "resources/models/smollm2-135m",
        tmp_path / "out",
        params,
        pretrained=params["pretrained"],
        item_files=[work / "results/items/sample/en.parquet"],
    )
    assert (
        got["source"] == "pretrained"
        and got["hook_name"] == "blocks.15.hook_resid_post"
        and got["fve"] >= 0.6
    )
    assert (tmp_path / "out/sae/cfg.json").is_file() and (tmp_path / "out/corpus.parquet").is_file()
    x = torch.randn(10, 576) * 50
    torch.testing.assert_close(open_sae(tmp_path / "out").encode(x), open_sae(src).encode(x))


def test_every_figure_is_a_png_and_the_report_bundles_them(smoke_run, tmp_path):
    work, cfg = smoke_run
    for name in FIGURES:
        data = (work / f"results/figures/{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, name
    # the report goes outside the smoke run's folder: no test changes that folder
    res = snakemake(work, cfg, "--report", str(tmp_path / "report.html"))
    assert res.returncode == 0, res.stderr[-3000:]
    html = (tmp_path / "report.html").read_text()
    for caption in (
        "Accuracy vs sparsity by format",
        "MC-only rate by language and sparsity",
        "Gold first-token rank of MC-only items",
        "Recovery of MC-only items by decode",
        "Greedy vs oracle accuracy over every selected item",
        "Benchmark coverage of SAE concepts",
        "Top and bottom concepts",
        "Concepts significantly damaged by pruning",
    ):
        assert caption in html, caption


def test_the_run_wrote_its_manifest_with_the_summarys_numbers(smoke_run):
    """results/run.json: the resolved config, versions, commit, where every model job ran (all
    on the CPU: the smoke config pins it), the run's times, and per checkpoint the numbers
    `summary --json` prints."""
    work, cfg = smoke_run
    manifest = json.loads((work / "results/run.json").read_text())
    res = subprocess.run(
        [sys.executable, "-m", "benchmark_illusion", "summary", "--json"],
        capture_output=True,
        text=True,
        cwd=work,
    )
    assert res.returncode == 0, res.stderr
    assert manifest["checkpoints"] == json.loads(res.stdout)
    assert len(manifest["checkpoints"]) == 1 + N_PRUNED + len(QUANTIZED)
    given = yaml.safe_load(cfg.read_text())
    assert manifest["config"]["seed"] == given["seed"]
    assert manifest["config"]["pruning"]["nm"] == given["pruning"]["nm"]
    assert manifest["config"]["evaluation"]["batch_tokens"] > 0  # a default, resolved
    assert manifest["software"]["packages"]["snakemake"]
    assert manifest["started"] < manifest["finished"]
    devices = manifest["devices"]
    assert {"evaluate", "prune", "quantize"} <= set(devices)
    assert {d["device"] for jobs in devices.values() for d in jobs} == {"cpu"}
    # one evaluate job per checkpoint and language, the dense one included
    assert sum(d["jobs"] for d in devices["evaluate"]) == 2 * (1 + N_PRUNED + len(QUANTIZED))


def test_summary_prints_one_pooled_line_per_checkpoint(smoke_run):
    work, _ = smoke_run
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark_illusion",
            "--db",
            str(work / "results/illusion.duckdb"),
            "summary",
            "--csv",
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(rows) == 1 + N_PRUNED + len(QUANTIZED)
    assert {r["bits"] for r in rows if r["method"] in ("rtn", "gptq")} == {"8"}
    assert {
        "open",
        "candidates",
        "mc",
        "delta_pr",
        "mc_only_rate_ci",
        "floor",
        "guess_adj",
        "recovered",
        "false_rec",
        "demoted",
        "erased",
    } <= set(rows[0])


def test_metric_settings_change_reruns_only_aggregate_and_figures(smoke_run):
    work, cfg = smoke_run
    changed = yaml.safe_load(cfg.read_text())
    changed["metrics"] = {"bootstrap_replicates": 500}
    path = work / "metrics-changed.yaml"
    path.write_text(yaml.safe_dump(changed))
    res = snakemake(work, path, "-n")
    assert res.returncode == 0, res.stderr[-3000:]
    # the gap tables are copied in beside the metric tables, so they follow
    assert planned_jobs(res.stdout + res.stderr) == AGGREGATION


def test_second_run_has_nothing_to_do(smoke_run):
    work, cfg = smoke_run
    res = snakemake(work, cfg, "-n")
    assert res.returncode == 0
    assert "Nothing to be done" in res.stdout + res.stderr


OUTER_SNAKEFILE = """configfile: "{config}"


module illusion:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from illusion
"""


ALL_TABLES = """
import duckdb, json
con = duckdb.connect("results/illusion.duckdb", read_only=True)
names = [r[0] for r in con.execute(
    "SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()]
def cell(v):
    return v if isinstance(v, float) else repr(v)
rows = {t: con.execute(f'SELECT * FROM "{t}" ORDER BY ALL').fetchall() for t in names}
print(json.dumps({t: [[cell(v) for v in r] for r in rs] for t, rs in rows.items()}))
"""


def all_tables(work: Path) -> dict[str, list]:
    """Every table and view of a run's database, rows sorted, floats as floats (the views read
    the run's Parquet logs by relative paths: the run folder is the working directory)."""
    out = subprocess.run(
        [sys.executable, "-c", ALL_TABLES], cwd=work, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def same_tables(a: dict[str, list], b: dict[str, list], rtol: float = 1e-9) -> list[str]:
    """The tables whose rows differ: every value equal, floats up to rtol (sums in another order:
    the smoke run's jobs may run on one SLURM CPU each, a re-run here on two threads)."""

    def same(u, v) -> bool:
        if isinstance(u, float) and isinstance(v, float):
            return (math.isnan(u) and math.isnan(v)) or math.isclose(u, v, rel_tol=rtol)
        return u == v

    assert a.keys() == b.keys()
    return [
        t
        for t in a
        if len(a[t]) != len(b[t])
        or not all(
            len(x) == len(y) and all(map(same, x, y)) for x, y in zip(a[t], b[t], strict=True)
        )
    ]


def link_copy(work: Path, copy: Path) -> None:
    """The smoke run's folder for a test that runs Snakemake again: results/ and resources/ as
    hard links (a job replaces an output with a new file, never writes into the old one), the
    rest (Snakemake's metadata, the logs, which are rewritten in place) as real copies, so that
    nothing the test runs changes the smoke run's own files."""

    copy.mkdir(parents=True)
    for entry in work.iterdir():
        if entry.name.endswith(".lock"):
            continue
        target = copy / entry.name
        if entry.is_dir():
            linked = entry.name in ("results", "resources")
            shutil.copytree(
                entry,
                target,
                copy_function=os.link if linked else shutil.copy2,
                ignore=shutil.ignore_patterns("*.lock*", "locks"),
            )
        else:
            shutil.copy2(entry, target)


def test_the_workflow_runs_as_a_module_of_another_to_the_same_tables(smoke_run, tmp_path):
    """Imported by another workflow (`module` + `use rule * from`): it plans the same jobs as
    the workflow run directly (its SQL definitions found from its own folder, not the caller's),
    finds nothing to do on the smoke run's files, and its aggregation writes the same tables."""

    work, cfg = smoke_run
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "Snakefile").write_text(
        OUTER_SNAKEFILE.format(config=cfg, snakefile=ROOT / "Snakefile")
    )
    outer_cmd = [str(Path(sys.executable).parent / "snakemake"), "--cores", "2"]
    outer_cmd += ["-s", str(outer / "Snakefile")]

    def plan(cmd: list[str], folder: Path) -> tuple[dict[str, int], int]:
        res = subprocess.run(cmd + ["-n", "-d", str(folder)], capture_output=True, text=True)
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        out = res.stdout + res.stderr
        return planned_jobs(out), out.count("workflow/sql/")

    fresh = tmp_path / "fresh"
    direct, direct_sql = plan(snakemake_cmd(fresh, cfg), fresh)
    module, module_sql = plan(outer_cmd, fresh)
    n_sql = len(list((ROOT / "workflow/sql").glob("*.sql")))
    n_sql += len(list((ROOT / "workflow/sql/concepts").glob("*.sql")))
    assert module == direct and module_sql == direct_sql >= n_sql > 0
    # the smoke run's files (hard links; replaced outputs get new files): nothing to do, then
    # the aggregation again through the module, to the same tables
    copy = tmp_path / "run"
    link_copy(work, copy)
    res = subprocess.run(outer_cmd + ["-n", "-d", str(copy)], capture_output=True, text=True)
    assert "Nothing to be done" in res.stdout + res.stderr, (res.stdout + res.stderr)[-3000:]
    res = subprocess.run(
        outer_cmd + ["-d", str(copy), "--forcerun", "aggregate", "--until", "competency_gaps"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert (copy / "results/illusion.duckdb").stat().st_ino != (
        work / "results/illusion.duckdb"
    ).stat().st_ino
    assert same_tables(all_tables(copy), all_tables(work)) == []


def test_variants_made_elsewhere_run_through_every_table_beside_the_pipelines(smoke_run, tmp_path):
    """Compressed variants of the bundled model made elsewhere, on the smoke run's files (hard
    links): a GGUF file re-quantized to Q4_0 with the gguf package (tests/gguf_variants.py), and
    a `local` folder that is the smoke run's own magnitude 30% checkpoint. Only their imports and
    evaluations run; they appear in every table beside the pipeline's checkpoints, their sizes
    measured; the local variant's rows are the pipeline checkpoint's, bit for bit. A variant
    with another tokenizer stops the run before any job, and twins are planned for variants."""

    from gguf_variants import bundled_gguf, write_variant

    work, cfg = smoke_run
    copy = tmp_path / "run"
    link_copy(work, copy)
    q4 = write_variant(bundled_gguf(), tmp_path / "SmolLM2-135M-Instruct.Q4_0.gguf", "Q4_0")
    pruned = "results/checkpoints/smollm2-135m/magnitude/unstructured/0.3"
    edited = yaml.safe_load(cfg.read_text())
    edited["models"]["smollm2-135m"]["variants"] = {
        "q4_0": {"source": "gguf_file", "path": str(q4), "method": "gguf-q4_0", "bits": 4},
        "mag30": {"source": "local", "path": pruned, "method": "magnitude", "sparsity": 0.3},
    }
    path = tmp_path / "variants.yaml"
    path.write_text(yaml.safe_dump(edited, sort_keys=False))

    res = snakemake(copy, path, "-n")
    assert res.returncode == 0, res.stderr[-3000:]
    n_langs = 2
    assert planned_jobs(res.stdout + res.stderr) == {
        "import_variant": 2,
        "evaluate": 2 * n_langs,
        **AGGREGATION,
    }
    # with a perturbation seed, each variant gets its twin like every compressed checkpoint
    twins = yaml.safe_load(path.read_text())
    twins["controls"] = {"perturbation": {"seeds": [0], "match": ["damage", "size"]}}
    (tmp_path / "twins.yaml").write_text(yaml.safe_dump(twins, sort_keys=False))
    res = snakemake(copy, tmp_path / "twins.yaml", "-n")
    assert res.returncode == 0, res.stderr[-3000:]
    plan = planned_jobs(res.stdout + res.stderr)
    n_compressed = N_PRUNED + len(QUANTIZED) + 2
    assert plan["perturb"] == 2 * n_compressed  # a damage and a size twin each
    for twin in ("damage0-q4_0", "noise0-q4_0", "damage0-mag30", "noise0-mag30"):
        assert twin in res.stdout + res.stderr, twin

    res = snakemake(copy, path)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]

    con = duckdb.connect(str(copy / "results/illusion.duckdb"), read_only=True)
    v = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT method, variant_method, measured_sparsity, bits, gguf_weight_type, "
            "gguf_bits_per_weight, weight_bits FROM variants ORDER BY method"
        ).fetchall()
    }
    # Q4_0: 32 weights in 18 bytes (16 bytes of 4-bit values, an fp16 scale): 4.5 bits; the
    # local checkpoint's zeros are the magnitude step's 30% (its dequantized Q4_1 values keep
    # their 4-bit grid: 16 distinct values per group of 32, hence bits 4)
    assert v["q4_0"][:1] == ("gguf-q4_0",) and v["q4_0"][3:6] == ("Q4_0", 4.5, 4.5)
    assert v["q4_0"][2] == 4
    assert v["mag30"][1] == pytest.approx(0.3, abs=1e-3) and v["mag30"][2] == 4
    families = dict(
        con.execute(
            "SELECT method, family FROM checkpoints WHERE method IN ('q4_0', 'mag30')"
        ).fetchall()
    )
    assert families == {"q4_0": "variant", "mag30": "variant"}

    # every table keyed by checkpoint has the variants' rows beside the pipeline's own
    def methods(table: str) -> set[str]:
        return {r[0] for r in con.execute(f"SELECT DISTINCT method FROM {table}").fetchall()}

    for table in ("accuracy", "mc_only", "delta_pr", "gold_rank", "oracle"):
        assert {"q4_0", "mag30", "magnitude", "dense"} <= methods(table), table
    # recovery: the checkpoints with MC-only items (magnitude 30% has some in the smoke run)
    assert {"mag30", "magnitude"} <= methods("recovery")
    concept = {r[0] for r in con.execute("SELECT DISTINCT method FROM chi_model").fetchall()}
    assert {"q4_0", "mag30"} <= concept
    con.close()
    summary = subprocess.run(
        [sys.executable, "-m", "benchmark_illusion", "summary"],
        cwd=copy,
        capture_output=True,
        text=True,
    )
    assert summary.returncode == 0 and "q4_0" in summary.stdout and "mag30" in summary.stdout

    # the local variant is the pipeline's checkpoint: same weights (hash), same rows
    for lang in ("en", "es"):
        gen = copy / "results/generations/smollm2-135m"
        mine = pl.read_parquet(gen / f"mag30/variant/0.3/sample/{lang}.parquet")
        theirs = pl.read_parquet(gen / f"magnitude/unstructured/0.3/sample/{lang}.parquet")
        assert mine["method"].unique().to_list() == ["mag30"]
        assert mine["structure"].unique().to_list() == ["variant"]
        keep = [c for c in mine.columns if c not in ("method", "structure", "seconds")]
        assert mine.select(keep).equals(theirs.select(keep)), lang

    # a variant whose tokenizer differs: the run stops before any job, naming it
    other = tmp_path / "other-tokenizer"
    shutil.copytree(copy / pruned, other)
    swap_two_tokens(other)
    edited["models"]["smollm2-135m"]["variants"]["other"] = {
        "source": "local",
        "path": str(other),
        "method": "retokenized",
    }
    path.write_text(yaml.safe_dump(edited, sort_keys=False))
    res = snakemake(copy, path)
    assert res.returncode != 0
    assert "models.smollm2-135m.variants.other: its tokenizer differs" in res.stdout + res.stderr
    assert "Select jobs to execute" not in res.stdout + res.stderr


HOLD_RW = """
import duckdb, sys, time
from pathlib import Path
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE my_notes AS SELECT 1 AS x")
Path(sys.argv[2]).write_text("ready")
while not Path(sys.argv[3]).exists():
    time.sleep(0.05)
"""


def test_the_paired_test_flags_the_positive_control_and_not_the_negative(smoke_run, tmp_path):
    """The whole pipeline's controls on the bundled model, beside the smoke run's files (hard
    links): Wanda 30 % with its damage-matched twin, the positive control `forbid` (the dense
    weights, each gold's first token forbidden in every decode, mc untouched) and the negative
    control placebo-wanda (noise at Wanda's damage, evaluated as if compressed). The paired test
    must flag the first and not the second; the twins' damage matches Wanda's."""
    work, cfg = smoke_run
    copy = tmp_path / "run"
    link_copy(work, copy)
    edited = yaml.safe_load(cfg.read_text())
    edited["pruning"] = {"methods": ["wanda"], "sparsities": [0.3]}
    edited["quantization"] = {"methods": []}
    edited["concepts"] = {"enabled": False}
    edited["controls"] = {
        "perturbation": {"seeds": [0], "match": ["damage"]},
        "positive": True,
        "negative": "wanda",
    }
    path = tmp_path / "controls.yaml"
    path.write_text(yaml.safe_dump(edited, sort_keys=False))
    res = snakemake(copy, path)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    con = duckdb.connect(str(copy / "results/illusion.duckdb"), read_only=True)
    rows = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT method, control, mc_only, floor_mc_only, mc_only_diff, diff_ci_low, "
            "diff_ci_high, flagged, n_items FROM illusion"
        ).fetchall()
    }
    assert set(rows) == {"wanda", "forbid", "placebo-wanda"}, rows
    ctl, mc_only, floor, diff, lo, hi, flagged, n = rows["forbid"]
    # positive: the decodes cannot write the gold, mc still finds it; its floor is the dense model
    assert ctl == "positive" and flagged and lo > 0 and mc_only >= 0.8 and floor == 0, rows
    ctl, mc_only, floor, diff, lo, hi, flagged, n = rows["placebo-wanda"]
    assert ctl == "negative" and not flagged and lo <= 0 <= hi, rows
    # the open answers the positive control gives contain no gold's first token
    open_forbid = con.execute(
        "SELECT avg(open_correct::INT), avg(mc_correct::INT) FROM item_outcomes "
        "WHERE method = 'forbid'"
    ).fetchone()
    assert open_forbid[0] <= 0.2 and open_forbid[1] == 1.0, open_forbid
    # the twins' and the placebo's damage match Wanda's (KL on the held-out windows)
    dmg = con.execute(
        "SELECT method, kl, source_kl, matched FROM damage ORDER BY method"
    ).fetchall()
    assert [d[0] for d in dmg] == ["damage0-wanda", "placebo-wanda"]
    for method, kl, source_kl, matched in dmg:
        assert matched and kl == pytest.approx(source_kl, rel=0.02), method
    con.close()


def test_the_database_survives_a_notebook_and_a_failed_aggregation(smoke_run, tmp_path):
    """On the smoke run's files (hard links) with concepts off, so that `aggregate` writes
    results/illusion.duckdb itself: a notebook holding the database read-write stops the
    aggregation before any work, naming the process; a truncated Parquet log stops it naming the
    file and the command that writes it again; after both, `summary` still reads the last good
    database and says that the last aggregation failed."""

    work, cfg = smoke_run
    copy = tmp_path / "run"
    link_copy(work, copy)
    edited = yaml.safe_load(cfg.read_text())
    edited["concepts"] = {"enabled": False}
    path = tmp_path / "no-concepts.yaml"
    path.write_text(yaml.safe_dump(edited, sort_keys=False))
    db = copy / "results/illusion.duckdb"
    good = copy / "results/illusion.last-good.duckdb"
    assert good.stat().st_ino == db.stat().st_ino  # published with its last good copy
    # the notebook below writes into the file: a copy of its own, not the smoke run's
    shutil.copyfile(db, tmp_path / "db")
    os.replace(tmp_path / "db", db)
    dbfile.keep_last_good(db)
    assert (
        good.stat().st_ino == db.stat().st_ino != (work / "results/illusion.duckdb").stat().st_ino
    )

    def summary() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "benchmark_illusion", "summary"],
            cwd=copy,
            capture_output=True,
            text=True,
        )

    ready, done = tmp_path / "ready", tmp_path / "done"
    notebook = subprocess.Popen([sys.executable, "-c", HOLD_RW, str(db), str(ready), str(done)])
    try:
        while not ready.exists():
            assert notebook.poll() is None
            time.sleep(0.05)
        res = snakemake(copy, path, "--forcerun", "aggregate", "--until", "aggregate")
        out = res.stdout + res.stderr + (copy / "logs/aggregate.log").read_text()
        assert res.returncode != 0
        assert "is open read-write in" in out and f"(PID {notebook.pid})" in out, out[-3000:]
        assert "read_only=True" in out
    finally:
        done.write_text("done")
        notebook.wait(timeout=60)
    first = summary()
    assert first.returncode == 0 and "magnitude" in first.stdout, first.stderr
    assert "Traceback" not in first.stderr and "is open read-write in" in first.stderr

    # a truncated evaluation log: a new file (the smoke run's own stays as it was)
    log = copy / "results/generations/smollm2-135m/wanda/unstructured/0.3/sample/es.parquet"
    damaged = log.with_name(".damaged")
    damaged.write_bytes(log.read_bytes()[:-100])
    os.replace(damaged, log)
    res = snakemake(copy, path, "--forcerun", "aggregate", "--until", "aggregate")
    out = res.stdout + res.stderr + (copy / "logs/aggregate.log").read_text()
    assert res.returncode != 0
    rel = "results/generations/smollm2-135m/wanda/unstructured/0.3/sample/es.parquet"
    assert f"damaged Parquet log {rel}: " in out, out[-3000:]
    assert f"(rule evaluate) with `snakemake --forcerun {rel}`" in out
    assert not db.exists() and good.is_file()  # Snakemake removed the failed job's output
    after = summary()
    assert after.returncode == 0 and after.stdout == first.stdout
    assert f"note: {db} is missing" in after.stderr and "damaged Parquet log" in after.stderr
    assert "(see logs/aggregate.log)" in after.stderr and "Traceback" not in after.stderr


def test_where_and_how_fast_settings_rerun_nothing(smoke_run):
    """evaluation.device, decode_rows, batch_tokens and decode_tokens change where and how fast
    rows are computed, not what they hold: no job re-runs."""
    work, cfg = smoke_run
    edited = yaml.safe_load(cfg.read_text())
    edited["evaluation"].update(device="cpu", decode_rows=3, batch_tokens=512, decode_tokens=1024)
    path = work / "speed-changed.yaml"
    path.write_text(yaml.safe_dump(edited))
    res = snakemake(work, path, "-n")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Nothing to be done" in res.stdout + res.stderr


def changed_plan(work: Path, cfg: Path, change) -> dict[str, int]:
    """The dry run's job table after `change` edits a copy of the smoke config."""
    edited = yaml.safe_load(cfg.read_text())
    change(edited)
    path = work / "changed.yaml"
    path.write_text(yaml.safe_dump(edited))
    res = snakemake(work, path, "-n")
    assert res.returncode == 0, res.stderr[-3000:]
    return planned_jobs(res.stdout + res.stderr)


AGGREGATION = {"aggregate": 1, "figures": 1, "competency_gaps": 1, "concept_figures": 1, "all": 1}
GAPS = {"competency_gaps": 1, "concept_figures": 1, "all": 1}


def test_adding_a_sparsity_runs_only_its_prune_and_evaluate_jobs(smoke_run):
    work, cfg = smoke_run
    plan = changed_plan(work, cfg, lambda c: c["pruning"]["sparsities"].append(0.2))
    # 3 methods x one new sparsity; each evaluated on 2 languages
    assert plan == {"prune": 3, "evaluate": 6, **AGGREGATION}


def test_adding_a_bit_width_runs_only_its_quantize_and_evaluate_jobs(smoke_run):
    work, cfg = smoke_run
    plan = changed_plan(work, cfg, lambda c: c["quantization"]["bits"].append(4))
    # rtn and gptq at 4 bits, each evaluated on 2 languages; the 8-bit checkpoints stay
    assert plan == {"quantize": 2, "evaluate": 4, **AGGREGATION}


def test_changing_a_gptq_setting_requantizes_only_gptq(smoke_run):
    work, cfg = smoke_run
    plan = changed_plan(work, cfg, lambda c: c["quantization"].update(gptq={"percdamp": 0.05}))
    assert plan == {"quantize": 1, "evaluate": 2, **AGGREGATION}


def test_changing_a_decoding_parameter_runs_only_evaluate_jobs(smoke_run):
    work, cfg = smoke_run
    plan = changed_plan(work, cfg, lambda c: c["evaluation"]["recovery"].update(num_beams=3))
    # every evaluation on the selected items, the dense model's too (6 x 2 languages); the dense
    # pool runs no recovery decode, so neither it nor the selection re-runs
    assert plan == {"evaluate": 2 * (1 + N_PRUNED + len(QUANTIZED)), **AGGREGATION}


def test_adding_a_language_runs_only_its_chain(smoke_run):
    work, cfg = smoke_run
    plan = changed_plan(work, cfg, lambda c: c["datasets"]["sample"]["languages"].append("de"))
    # concepts.sae.languages is pinned: the SAE stays, the new language only gets its activations
    assert plan == {
        "download_dataset": 1,
        "build_items": 1,
        "evaluate_pool": 1,
        "select_items": 1,
        "evaluate": 1 + N_PRUNED + len(QUANTIZED),
        "concept_activations": 1,
        **AGGREGATION,
    }


@pytest.mark.parametrize(
    "section,change,reruns",
    [
        ("gaps", {"min_support": 4, "over_quantile": 0.8}, {}),
        ("labels", {"top_examples": 7}, {"concept_labels": 1}),
        ("sae", {"epochs": 7}, {"sae": 1, "concept_labels": 1, "concept_activations": 2}),
    ],
    ids=["gaps", "labels", "sae"],
)
def test_concept_setting_change_reruns_only_what_reads_it(smoke_run, section, change, reruns):
    work, cfg = smoke_run
    plan = changed_plan(work, cfg, lambda c: c["concepts"][section].update(change))
    assert plan == {**reruns, **GAPS}


def test_item_token_setting_change_reruns_activations_not_the_sae(smoke_run):
    work, cfg = smoke_run
    plan = changed_plan(work, cfg, lambda c: c["concepts"].update(tokens="prompt"))
    assert plan == {"concept_activations": 2, **GAPS}


def test_concepts_off_plans_no_concept_job_and_keeps_the_metric_database_path(smoke_run):
    work, cfg = smoke_run
    edited = yaml.safe_load(cfg.read_text())
    edited["concepts"]["enabled"] = False
    path = work / "off.yaml"
    path.write_text(yaml.safe_dump(edited))
    res = snakemake(work, path, "-n", "--forceall")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    plan = planned_jobs(out)
    assert not CONCEPT_RULES & set(plan) and plan["aggregate"] == 1
    assert "output: results/illusion.duckdb" in out


def session_processes(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process in session `sid`."""

    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getsid(int(d.name)) == sid:
                out.append(
                    (int(d.name), (d / "cmdline").read_bytes().replace(b"\0", b" ").decode())
                )
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    return out


def start_and_kill_mid_evaluation(
    work: Path, cfg: Path, target: str, rule_log: Path, whole_run: bool
) -> None:
    """Re-run the evaluate job of `target` and SIGKILL it mid-evaluation: only the job's process
    (whole_run=False: a job killed on its node), or Snakemake with it (a killed session)."""
    import signal
    import time

    rule_log.unlink(missing_ok=True)
    proc = subprocess.Popen(
        snakemake_cmd(work, cfg, "--forcerun", target, "--", target),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # the job's log shows its first progress bar (open + mc) at 100%: the model is loaded and
    # evaluation under way, with the candidates and recovery decodes still to run
    deadline = time.time() + 300
    while time.time() < deadline and not (rule_log.is_file() and "100%|" in rule_log.read_text()):
        assert proc.poll() is None, "the job finished before it could be killed"
        time.sleep(0.05)
    assert proc.poll() is None
    if whole_run:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        jobs = [pid for pid, cmdline in session_processes(proc.pid) if "evaluate.py" in cmdline]
        assert len(jobs) == 1, session_processes(proc.pid)
        os.kill(jobs[0], signal.SIGKILL)
    rc = proc.wait(timeout=120)
    assert rc != 0
    # no half-written log: Snakemake removed the old one before the job started, the job never wrote
    assert not (work / target).exists()
    assert not list((work / target).parent.glob(".*.tmp"))


@pytest.mark.parametrize("whole_run", [False, True], ids=["job-killed", "snakemake-killed"])
def test_killed_evaluate_job_reruns_to_identical_rows(smoke_run, whole_run, tmp_path):
    """SIGKILL mid-evaluation; the re-run with --rerun-incomplete writes the same rows as the
    uninterrupted run (every column but the wall time `seconds`). On a copy of the smoke run's
    folder (link_copy): the smoke run's own files stay as they were."""
    work, cfg = smoke_run
    copy = tmp_path / "copy"
    link_copy(work, copy)
    # Spanish: 5 selected items, half the re-run of the 10 English ones
    target = "results/generations/smollm2-135m/wanda/unstructured/0.3/sample/es.parquet"
    rule_log = copy / "logs/evaluate/smollm2-135m/wanda/unstructured/0.3/sample/es.log"
    before = pl.read_parquet(work / target).drop("seconds")
    start_and_kill_mid_evaluation(copy, cfg, target, rule_log, whole_run)
    if whole_run:
        # a killed Snakemake leaves its lock on the working directory; --unlock is the documented
        # way out
        locked = snakemake(
            copy, cfg, "--rerun-incomplete", target
        )  # a dry run takes no lock: try for real
        assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr
        assert snakemake(copy, cfg, "--unlock").returncode == 0
    res = snakemake(copy, cfg, "--rerun-incomplete", target)
    assert res.returncode == 0, res.stderr[-3000:]
    after = pl.read_parquet(copy / target).drop("seconds")
    assert after.equals(before)
    assert pl.read_parquet(work / target).drop("seconds").equals(before)  # the original is intact
    # the database is stale now (its input is newer, its rows the same): the next full run redoes
    # only the aggregation
    res = snakemake(copy, cfg, "-n")
    assert planned_jobs(res.stdout + res.stderr) == AGGREGATION
