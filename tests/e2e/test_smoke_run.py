"""End to end on the real bundled model: the smoke run (tests/smoke.py: snakemake download ->
items -> dense evaluation -> selection -> calibration -> magnitude/Wanda/SparseGPT at 30%
sparsity and 2:4, RTN and GPTQ at 8 bits -> evaluation of every checkpoint -> DuckDB and
figures, and the competency gaps: SAE -> labels -> concept activations -> gap tables ->
figures), and the checks on what it wrote: its jobs, files, logs, tables, CLI, figures and
manifest. The other modules of this folder check its checkpoints (test_checkpoints.py) and
concepts (test_concepts.py), what a config change re-runs (test_reruns.py), and runs on a copy
of its folder (test_runs_on_copies.py).

Where a SLURM cluster answers (or can be started: root, tests/slurm/start-cluster.sh; `.ci/run`
does so and sets BENCHMARK_ILLUSION_REQUIRE_SLURM=1), the smoke run goes through
`snakemake --profile tests/slurm/profile`: every job is an sbatch job, and one evaluate job is
cancelled while it runs, which the profile's retry must absorb. Elsewhere it runs locally and
the SLURM tests skip."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import duckdb
import polars as pl
import pytest
import yaml

from benchmark_illusion.evaluation.evaluate import LOG_SCHEMA
from benchmark_illusion.metrics.figures.names import CONCEPT_FIGURES, METRIC_FIGURES
from dag import planned_jobs
from e2e.common import (
    CHECKPOINTS,
    CONCEPT_RULES,
    N_PRUNED,
    NM,
    QUANTIZED,
    SMOKE,
)
from slurm.helpers import skip_reason, squeue_history
from smoke import snakemake

pytestmark = pytest.mark.e2e


GPU_RULES = {
    "evaluate_pool",
    "prune",
    "quantize",
    "evaluate",
    "sae",
    "concept_labels",
    "concept_activations",
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
    from benchmark_illusion.evaluation.settings import EvalSettings
    from benchmark_illusion.language import function_edge

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
FIGURES = METRIC_FIGURES + CONCEPT_FIGURES


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
