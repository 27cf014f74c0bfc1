"""What Snakemake re-runs on the smoke run's folder after a config change (dry runs: only the
jobs that read the changed setting), nothing after none, and the workflow imported as a module
of another one plans and aggregates the same."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from dag import planned_jobs
from e2e.common import (
    AGGREGATION,
    CONCEPT_RULES,
    N_PRUNED,
    QUANTIZED,
    link_copy,
)
from smoke import ROOT, snakemake, snakemake_cmd

CONCEPT_CHANGES = [
    ("gaps", {"min_support": 4, "over_quantile": 0.8}, {}),
    ("labels", {"top_examples": 7}, {"concept_labels": 1}),
    ("sae", {"epochs": 7}, {"sae": 1, "concept_labels": 1, "concept_activations": 2}),
]


def concept_change(section: str, change: dict):
    return lambda c: c["concepts"][section].update(change)


# The module's dry runs on the smoke run's folder: name -> (the edit of the smoke config, None for
# the config itself; further arguments). A dry run takes no lock and each reads its own config
# file, so they run side by side (`dry_runs`) instead of one after the other.
DRY_RUNS = {
    "metrics": (lambda c: c.update(metrics={"bootstrap_replicates": 500}), ()),
    "again": (None, ()),
    "speed": (
        lambda c: c["evaluation"].update(
            device="cpu", decode_rows=3, batch_tokens=512, decode_tokens=1024
        ),
        (),
    ),
    "sparsity": (lambda c: c["pruning"]["sparsities"].append(0.2), ()),
    "bits": (lambda c: c["quantization"]["bits"].append(4), ()),
    "gptq": (lambda c: c["quantization"].update(gptq={"percdamp": 0.05}), ()),
    "beams": (lambda c: c["evaluation"]["recovery"].update(num_beams=3), ()),
    "language": (lambda c: c["datasets"]["sample"]["languages"].append("de"), ()),
    **{
        f"concepts-{section}": (concept_change(section, change), ())
        for section, change, _ in CONCEPT_CHANGES
    },
    "tokens": (lambda c: c["concepts"].update(tokens="prompt"), ()),
    "concepts-off": (lambda c: c["concepts"].update(enabled=False), ("--forceall",)),
}


@pytest.fixture(scope="module")
def dry_runs(smoke_run):
    """Every dry run of DRY_RUNS, started when the module's first test asks for one and run a few
    at a time beside each other and the module's tests: name -> its future
    (subprocess.CompletedProcess)."""
    work, cfg = smoke_run

    def start(name, change, args):
        path = cfg
        if change is not None:
            edited = yaml.safe_load(cfg.read_text())
            change(edited)
            path = work / f"changed-{name}.yaml"
            path.write_text(yaml.safe_dump(edited))
        return pool.submit(snakemake, work, path, "-n", *args)

    with ThreadPoolExecutor(max_workers=min(4, max(2, os.cpu_count() or 2))) as pool:
        yield {name: start(name, *run) for name, run in DRY_RUNS.items()}


def dry_run(dry_runs, name: str) -> tuple[dict[str, int], str]:
    """The job table and output of the dry run `name` (DRY_RUNS); an empty table when Snakemake
    has nothing to do (it then prints no job table)."""
    res = dry_runs[name].result()
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    return (planned_jobs(out) if "Job stats:" in out else {}), out


def test_metric_settings_change_reruns_only_aggregate_and_figures(dry_runs):
    # the gap tables are copied in beside the metric tables, so they follow
    assert dry_run(dry_runs, "metrics")[0] == AGGREGATION


def test_second_run_has_nothing_to_do(dry_runs):
    assert "Nothing to be done" in dry_run(dry_runs, "again")[1]


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
    with ThreadPoolExecutor(max_workers=2) as pool:  # two dry runs side by side: no lock taken
        planned = pool.map(plan, [snakemake_cmd(fresh, cfg), outer_cmd], [fresh, fresh])
        (direct, direct_sql), (module, module_sql) = planned
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


def test_where_and_how_fast_settings_rerun_nothing(dry_runs):
    """evaluation.device, decode_rows, batch_tokens and decode_tokens change where and how fast
    rows are computed, not what they hold: no job re-runs."""
    assert "Nothing to be done" in dry_run(dry_runs, "speed")[1]


GAPS = {"competency_gaps": 1, "concept_figures": 1, "all": 1}


def test_adding_a_sparsity_runs_only_its_prune_and_evaluate_jobs(dry_runs):
    plan = dry_run(dry_runs, "sparsity")[0]
    # 3 methods x one new sparsity; each evaluated on 2 languages
    assert plan == {"prune": 3, "evaluate": 6, **AGGREGATION}


def test_adding_a_bit_width_runs_only_its_quantize_and_evaluate_jobs(dry_runs):
    plan = dry_run(dry_runs, "bits")[0]
    # rtn and gptq at 4 bits, each evaluated on 2 languages; the 8-bit checkpoints stay
    assert plan == {"quantize": 2, "evaluate": 4, **AGGREGATION}


def test_changing_a_gptq_setting_requantizes_only_gptq(dry_runs):
    plan = dry_run(dry_runs, "gptq")[0]
    assert plan == {"quantize": 1, "evaluate": 2, **AGGREGATION}


def test_changing_a_decoding_parameter_runs_only_evaluate_jobs(dry_runs):
    plan = dry_run(dry_runs, "beams")[0]
    # every evaluation on the selected items, the dense model's too (6 x 2 languages); the dense
    # pool runs no recovery decode, so neither it nor the selection re-runs
    assert plan == {"evaluate": 2 * (1 + N_PRUNED + len(QUANTIZED)), **AGGREGATION}


def test_adding_a_language_runs_only_its_chain(dry_runs):
    plan = dry_run(dry_runs, "language")[0]
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
    "section,change,reruns", CONCEPT_CHANGES, ids=[c[0] for c in CONCEPT_CHANGES]
)
def test_concept_setting_change_reruns_only_what_reads_it(dry_runs, section, change, reruns):
    plan = dry_run(dry_runs, f"concepts-{section}")[0]
    assert plan == {**reruns, **GAPS}


def test_item_token_setting_change_reruns_activations_not_the_sae(dry_runs):
    plan = dry_run(dry_runs, "tokens")[0]
    assert plan == {"concept_activations": 2, **GAPS}


def test_concepts_off_plans_no_concept_job_and_keeps_the_metric_database_path(dry_runs):
    plan, out = dry_run(dry_runs, "concepts-off")
    assert not CONCEPT_RULES & set(plan) and plan["aggregate"] == 1
    assert "output: results/illusion.published.json" in out  # the stamp of results/illusion.duckdb
