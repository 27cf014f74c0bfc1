"""Snakemake runs beside the smoke run, on a copy of its folder (hard links; the smoke run's own
files stay as they were): bfloat16, the letters style, variants made elsewhere, the controls'
paired test, a database held by a notebook or fed a damaged log, and evaluate jobs killed mid-run
that re-run to the same rows."""

from __future__ import annotations

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

from benchmark_illusion.metrics import dbfile
from conftest import swap_two_tokens
from dag import planned_jobs
from e2e.common import (
    AGGREGATION,
    N_PRUNED,
    QUANTIZED,
    link_copy,
)
from smoke import Snakemake, snakemake, snakemake_cmd


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

    # with a perturbation seed, each variant gets its twin like every compressed checkpoint: its
    # dry run goes side by side with the first (a dry run takes no lock)
    twins = yaml.safe_load(path.read_text())
    twins["controls"] = {"perturbation": {"seeds": [0], "match": ["damage", "size"]}}
    (tmp_path / "twins.yaml").write_text(yaml.safe_dump(twins, sort_keys=False))
    twins_run = Snakemake(snakemake_cmd(copy, tmp_path / "twins.yaml", "-n"))
    res = snakemake(copy, path, "-n")
    twins_res = twins_run.wait()
    assert res.returncode == 0, res.stderr[-3000:]
    n_langs = 2
    assert planned_jobs(res.stdout + res.stderr) == {
        "import_variant": 2,
        "evaluate": 2 * n_langs,
        **AGGREGATION,
    }
    res = twins_res
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
    file and the command that writes it again; after both, the database from before is still in
    place under its own name (Snakemake deleted the rule's output, the database's stamp), and
    `summary` reads it and says that the last aggregation failed."""

    work, cfg = smoke_run
    copy = tmp_path / "run"
    link_copy(work, copy)
    edited = yaml.safe_load(cfg.read_text())
    edited["concepts"] = {"enabled": False}
    path = tmp_path / "no-concepts.yaml"
    path.write_text(yaml.safe_dump(edited, sort_keys=False))
    db = copy / "results/illusion.duckdb"
    stamp = dbfile.stamp_path(db)
    assert stamp.is_file()  # the rule's declared output, written when the database was published
    # the notebook below writes into the file: a copy of its own, not the smoke run's
    shutil.copyfile(db, tmp_path / "db")
    os.replace(tmp_path / "db", db)
    assert db.stat().st_ino != (work / "results/illusion.duckdb").stat().st_ino

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
    assert db.is_file() and not stamp.exists()  # Snakemake deleted the stamp, not the database
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
    assert db.is_file() and not stamp.exists()  # Snakemake removed the failed job's output
    after = summary()
    assert after.returncode == 0 and after.stdout == first.stdout
    assert "is missing" not in after.stderr and "damaged Parquet log" in after.stderr
    assert "(see logs/aggregate.log)" in after.stderr and "Traceback" not in after.stderr


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
