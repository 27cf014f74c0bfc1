"""The perturbation floor: perturbed twins (dense + seeded noise of a compressed checkpoint's
relative size per Linear), their place in the DAG, and the perturbation_floor table."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess

import duckdb
import polars as pl
import pytest
import torch
import yaml
from torch import nn

from benchmark_illusion.compression import damage as dmg
from benchmark_illusion.compression import perturbation
from benchmark_illusion.compression.names import (
    PLACEBO_SEED,
    parse_perturbed,
    parse_placebo,
    parse_replicate,
    parse_twin,
    perturbed_method,
    placebo_method,
    replicate_method,
)
from benchmark_illusion.compression.perturbation import perturb_model
from benchmark_illusion.compression.pruning.layerwise import PruneSettings, prune_model
from benchmark_illusion.compression.steps import control_file, perturb_file
from benchmark_illusion.compression.structures import parse_structure
from benchmark_illusion.config import params as rule_params
from benchmark_illusion.metrics.aggregate import create_views, perturbation_rows, run_metric_sql
from benchmark_illusion.models.keys import CheckpointKey
from conftest import ROOT, make_tiny_model
from dag import planned_jobs
from metrics.test_sql import DENSE, POOL, PRUNED, SQL, frame, row, selected_file

SNAKEMAKE = ROOT / ".venv/bin/snakemake"


def rel_changes(model, dense) -> dict[str, float]:
    """||W' - W||_F / ||W||_F of every Linear of `model` against `dense`, in float64."""
    d = dict(dense.named_modules())
    return {
        name: float((m.weight.detach().double() - d[name].weight.detach().double()).norm())
        / float(d[name].weight.detach().double().norm())
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
    }


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """(dense model, compressed folder, compressed model): the tiny model pruned by magnitude
    at 30 %, with one decoder Linear put back as it was (a Linear the compression left alone)."""
    dense = make_tiny_model(128, layers=2)
    pruned = copy.deepcopy(dense)
    prune_model(pruned, None, PruneSettings("magnitude", 0.3, parse_structure("unstructured")))
    with torch.no_grad():
        pruned.model.layers[1].mlp.down_proj.weight.copy_(
            dense.model.layers[1].mlp.down_proj.weight
        )
    out = tmp_path_factory.mktemp("pruned") / "ckpt"
    pruned.save_pretrained(out, safe_serialization=True)
    return dense, out, pruned


def test_twin_names_parse_and_stay_apart_from_other_methods():
    assert perturbed_method(0, "wanda") == "noise0-wanda"
    assert parse_perturbed("noise12-gptq") == (12, "gptq")
    for other in ("wanda", "dense", "rtn", "noise-wanda", "noise01-wanda", "noisex-rtn"):
        assert parse_perturbed(other) is None, other
    with pytest.raises(ValueError):
        perturbed_method(-1, "wanda")
    # the kinds: one prefix each, parsed back; a placebo and a replicate are no twins
    assert perturbed_method(2, "wanda", "damage") == "damage2-wanda"
    assert perturbed_method(0, "sparsegpt-s7", "structure") == "mask0-sparsegpt-s7"
    assert parse_twin("damage2-wanda") == ("damage", 2, "wanda")
    assert parse_twin("mask0-sparsegpt-s7") == ("structure", 0, "sparsegpt-s7")
    assert parse_twin("noise1-rtn") == ("size", 1, "rtn")
    for other in ("placebo-wanda", "wanda-s3", "forbid", "damage-wanda", "kl0-wanda"):
        assert parse_twin(other) is None, other
    assert placebo_method("wanda") == "placebo-wanda" and parse_placebo("placebo-wanda") == "wanda"
    assert parse_placebo("damage0-wanda") is None
    assert replicate_method("wanda", 5, [5, 6]) == "wanda"
    assert replicate_method("wanda", 6, [5, 6]) == "wanda-s6"
    assert parse_replicate("wanda-s6") == ("wanda", 6)
    assert parse_replicate("wanda") == ("wanda", None)
    assert parse_replicate("my-s1", ("wanda",)) == ("my-s1", None)  # a variant's name


def test_relative_change_per_linear_matches_the_compressed_checkpoint(tiny_pair):
    dense, folder, pruned = tiny_pair
    twin = copy.deepcopy(dense)
    report = perturb_model(twin, folder, seed=0)
    want, got = rel_changes(pruned, dense), rel_changes(twin, dense)
    changed = {n for n, r in want.items() if r > 0}
    assert len(changed) == 13  # 2 blocks x 7 Linears, one put back
    assert set(report["layers"]) == changed
    for name in changed:
        assert got[name] == pytest.approx(want[name], abs=1e-6), name
        assert report["layers"][name]["target"] == pytest.approx(want[name], abs=1e-6)
        assert report["layers"][name]["measured"] == pytest.approx(got[name], abs=1e-6)
    assert report["max_abs_deviation"] < 1e-6
    assert report["relative_change"] == pytest.approx(report["source_relative_change"], abs=1e-6)
    # noise, not a mask: no weight of the twin is zeroed where the compressed one is
    w = twin.model.layers[0].self_attn.q_proj.weight
    assert int((w == 0).sum()) == 0


def test_linears_the_compression_left_alone_are_not_perturbed(tiny_pair):
    dense, folder, _ = tiny_pair
    twin = copy.deepcopy(dense)
    report = perturb_model(twin, folder, seed=3)
    assert "model.layers.1.mlp.down_proj" in report["unchanged"]
    d = dict(dense.named_parameters())
    for name, p in twin.named_parameters():
        moved = not torch.equal(p, d[name])
        expect = name.removesuffix(".weight") in report["layers"]
        assert moved == expect, name  # embeddings, norms, lm_head and the put-back Linear stay


def test_a_quantized_source_is_matched_too(tmp_path):
    from benchmark_illusion.compression.quantization import QuantizeSettings, quantize_model
    from benchmark_illusion.compression.structures import parse_grid

    dense = make_tiny_model(128, layers=1)
    quant = copy.deepcopy(dense)
    quantize_model(quant, None, QuantizeSettings("rtn", parse_grid("int4-g32")))
    quant.save_pretrained(tmp_path / "q", safe_serialization=True)
    twin = copy.deepcopy(dense)
    perturb_model(twin, tmp_path / "q", seed=1)
    want, got = rel_changes(quant, dense), rel_changes(twin, dense)
    for name, r in want.items():
        assert got[name] == pytest.approx(r, abs=1e-6), name


def test_a_source_that_changes_nothing_is_refused(tmp_path):
    dense = make_tiny_model(128, layers=1)
    dense.save_pretrained(tmp_path / "same", safe_serialization=True)
    with pytest.raises(ValueError, match="changes no Linear"):
        perturb_model(copy.deepcopy(dense), tmp_path / "same", seed=0)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, bundled_tokenizer, tiny_pair):
    """The tiny dense model as an imported model folder (tokenizer, provenance) and its pruned
    copy, for perturb_file."""
    dense, folder, _ = tiny_pair
    out = tmp_path_factory.mktemp("dense") / "model"
    dense.save_pretrained(out, safe_serialization=True)
    bundled_tokenizer.save_pretrained(out)
    (out / "provenance.json").write_text(json.dumps({"source": "test"}))
    return out, folder


def held_out(tmp_path, vocab: int = 128, n: int = 4, length: int = 32):
    """A damage-text file of seeded random token windows."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    path = tmp_path / "damage.safetensors"
    save_file({"input_ids": torch.randint(0, vocab, (n, length), generator=g)}, str(path))
    return path


def sha(folder) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_the_same_seed_gives_the_same_bytes_another_seed_other_weights(tiny_dirs, tmp_path):
    dense_dir, source = tiny_dirs
    params = rule_params.perturb({"models": {"tiny": {"dtype": "float32"}}}, "tiny")
    kw = dict(model="tiny", structure="unstructured", sparsity=0.3)
    windows = held_out(tmp_path)
    outs = {}
    for name, method in (
        ("a", "noise0-magnitude"),
        ("b", "noise0-magnitude"),
        ("c", "noise1-magnitude"),
    ):
        outs[name] = tmp_path / name
        report = perturb_file(
            dense_dir,
            source,
            outs[name],
            params,
            CheckpointKey(method=method, **kw),
            windows,
        )
        assert report["seed"] == int(method[5])
    assert sha(outs["a"]) == sha(outs["b"])
    assert sha(outs["a"]) != sha(outs["c"])
    saved = json.loads((outs["c"] / "perturbation.json").read_text())
    assert saved["source_method"] == "magnitude" and saved["structure"] == "unstructured"
    assert saved["n_perturbed"] == 13 and saved["max_abs_deviation"] < 1e-6
    prov = json.loads((outs["c"] / "provenance.json").read_text())
    assert prov["perturbation"]["seed"] == 1 and "weights_sha256" in prov
    assert (outs["c"] / "tokenizer.json").is_file()
    # the aggregation's rows from the folder
    (r,) = perturbation_rows([outs["c"]])
    assert r[:6] == ("tiny", "noise1-magnitude", "unstructured", 0.3, 1, "magnitude")
    with pytest.raises(ValueError, match="no perturbed method"):
        perturb_file(
            dense_dir,
            source,
            tmp_path / "x",
            params,
            CheckpointKey(method="wanda", **kw),
            windows,
        )
    assert not (tmp_path / "x").exists()


def test_the_twins_of_a_methods_replicates_are_independent_draws(tiny_dirs, tmp_path):
    """noise0-magnitude and noise0-magnitude-s1 (the twins of two replicates, one twin seed) draw
    their noise from different seeds (perturbation.draw_seed); the first replicate's twin keeps
    the twin seed itself, so a config with one replicate draws what it always drew."""
    dense_dir, source = tiny_dirs
    params = rule_params.perturb({"models": {"tiny": {"dtype": "float32"}}}, "tiny")
    kw = dict(model="tiny", structure="unstructured", sparsity=0.3)
    windows = held_out(tmp_path)
    reports = {
        method: perturb_file(
            dense_dir,
            source,
            tmp_path / method,
            params,
            CheckpointKey(method=method, **kw),
            windows,
        )
        for method in ("noise0-magnitude", "noise0-magnitude-s1", "noise0-magnitude-s2")
    }
    assert [r["seed"] for r in reports.values()] == [0, 0, 0]
    draws = [r["noise_seed"] for r in reports.values()]
    assert draws[0] == 0 and len(set(draws)) == 3
    assert len({sha(tmp_path / m) for m in reports}) == 3
    assert perturbation.draw_seed(0, "magnitude-s1") == draws[1]  # a function of (seed, k) only


# --- the damage-matched and structure-matched twins -------------------------------------------


def test_the_scale_search_meets_a_power_law_and_says_when_it_cannot():
    calls = []

    def measure(s):
        calls.append(s)
        return {"kl": 0.3 * s**2 + 0.01 * s**3, "nll": 1.0 + s}

    m = dmg.match_scale(measure, 0.12)
    assert m.matched and m.relative_error <= dmg.TOLERANCE and m.steps == len(calls) <= 6
    assert 0.3 * m.scale**2 + 0.01 * m.scale**3 == pytest.approx(0.12, rel=dmg.TOLERANCE)
    # a direction that cannot reach the target within its largest scale: the closest, unmatched
    capped = dmg.match_scale(measure, 5.0, max_scale=1.0)
    assert not capped.matched and capped.scale == 1.0
    assert dmg.match_scale(measure, 0.0).scale == 0.0


def tiny_measure(net, tmp_path):
    from safetensors.torch import load_file

    windows = load_file(str(held_out(tmp_path)))["input_ids"]
    return windows


def test_a_damage_twin_matches_the_checkpoints_kl_a_size_twin_does_not(tiny_pair, tmp_path):
    dense, folder, pruned = tiny_pair
    windows = tiny_measure(dense, tmp_path)
    ref = dmg.log_probs(dense, windows)
    source = dmg.damage(pruned, windows, ref)
    assert source["kl"] > 0 and dmg.damage(dense, windows, ref)["kl"] == pytest.approx(0, abs=1e-6)
    reports = {}
    for kind in ("size", "damage", "structure"):
        twin = copy.deepcopy(dense)
        reports[kind] = perturb_model(
            twin,
            folder,
            0,
            kind,
            measure=lambda s, t=twin: dmg.damage(t, windows, ref),
            source_damage=source,
        )
        # the report's damage is the stored weights' damage
        assert reports[kind]["damage_kl"] == pytest.approx(
            dmg.damage(twin, windows, ref)["kl"], rel=1e-5
        )
    for kind in ("damage", "structure"):
        r = reports[kind]
        assert r["matched"], (kind, r["damage_kl"], source["kl"])
        assert r["damage_kl"] == pytest.approx(source["kl"], rel=dmg.TOLERANCE)
    # noise of the checkpoint's size does other damage than the checkpoint: the reason for the
    # damage-matched floor
    assert abs(reports["size"]["damage_kl"] / source["kl"] - 1) > 3 * dmg.TOLERANCE
    assert reports["size"]["scale"] == 1.0 and reports["damage"]["scale"] != 1.0
    # the structure twin shrinks (never zeroes past) the weights of a random mask of the
    # checkpoint's size per Linear
    assert 0 < reports["structure"]["scale"] <= 1.0
    for name, layer in reports["structure"]["layers"].items():
        assert layer["source_zeroed"] > 0, name


def test_a_random_mask_twin_of_an_nm_source_keeps_the_pattern():
    g = torch.Generator().manual_seed(0)
    mask = perturbation._random_mask((4, 16), 0, (2, 4), g)
    assert mask.reshape(-1, 4).sum(1).eq(2).all()
    flat = perturbation._random_mask((4, 16), 10, None, g)
    assert int(flat.sum()) == 10


def test_damage_twins_and_the_placebo_are_written_with_their_damage(tiny_dirs, tmp_path):
    dense_dir, source = tiny_dirs
    params = rule_params.perturb({"models": {"tiny": {"dtype": "float32"}}}, "tiny")
    kw = dict(model="tiny", structure="unstructured", sparsity=0.3)
    windows = held_out(tmp_path)
    a = perturb_file(
        dense_dir,
        source,
        tmp_path / "d",
        params,
        CheckpointKey(method="damage0-magnitude", **kw),
        windows,
    )
    p = perturb_file(
        dense_dir,
        source,
        tmp_path / "p",
        params,
        CheckpointKey(method="placebo-magnitude", **kw),
        windows,
    )
    for r in (a, p):
        assert r["matched"] and r["damage_kl"] == pytest.approx(r["source_damage_kl"], rel=0.02)
        assert r["kind"] == "damage" and r["dense_nll"] > 0
    assert p["control"] == "placebo" and p["seed"] == PLACEBO_SEED
    assert sha(tmp_path / "d") != sha(tmp_path / "p")  # another draw of the same damage
    (row_,) = perturbation_rows([tmp_path / "p"])
    assert row_[9:11] == ("damage", "placebo") and row_[-1] is True


def test_the_positive_control_is_the_dense_model_with_its_ban(tiny_dirs, tmp_path):
    dense_dir, _ = tiny_dirs
    (dense_dir / ".snakemake_timestamp").touch()  # a workflow's marker in the dense folder
    control_file(dense_dir, tmp_path / "forbid", model="tiny")
    assert sha(tmp_path / "forbid") == sha(dense_dir)
    # the marker is not linked: touching the control's own would move the dense model's time,
    # and every job downstream of it would run again
    assert not (tmp_path / "forbid" / ".snakemake_timestamp").exists()
    assert (tmp_path / "forbid" / "config.json").stat().st_nlink == 1  # copied, not linked
    assert perturbation.control_of(tmp_path / "forbid")["forbid_gold_first_token"] is True
    assert perturbation.control_of(dense_dir) is None


# --- the perturbation_floor table, by hand ----------------------------------------------------


def twin_rows(method, outcomes):
    """Rows of a twin: item -> (open, mc); candidates right everywhere."""
    return [
        r
        for item, (o, m) in outcomes.items()
        for r in (
            row(method, item, "open", o, rank=1 if o else 4),
            row(method, item, "mc", m),
            row(method, item, "candidates", True),
        )
    ]


# noise0-w: i1 MC-only. noise1-w: i2 and i4 MC-only, i3 wrong in both.
TWINS = twin_rows(
    "noise0-w", {"i1": (False, True), "i2": (True, True), "i3": (True, True), "i4": (True, True)}
) + twin_rows(
    "noise1-w",
    {"i1": (True, True), "i2": (False, True), "i3": (False, False), "i4": (False, True)},
)


@pytest.fixture
def floor_db(tmp_path):
    frame(DENSE + PRUNED + TWINS).write_parquet(tmp_path / "g.parquet")
    frame(POOL).write_parquet(tmp_path / "p.parquet")
    reports = []
    for seed in (0, 1):
        path = tmp_path / f"noise{seed}.json"
        path.write_text(
            json.dumps(
                {
                    "model": "m",
                    "method": f"noise{seed}-w",
                    "structure": "unstructured",
                    "sparsity": 0.5,
                    "seed": seed,
                    "source_method": "w",
                    "relative_change": 0.25 + seed * 1e-7,
                    "source_relative_change": 0.25,
                    "n_perturbed": 14,
                }
            )
        )
        reports.append(str(path))
    con = duckdb.connect()
    create_views(
        con,
        [str(tmp_path / "g.parquet")],
        [selected_file(tmp_path, ["i1", "i2", "i3", "i4"])],
        [str(tmp_path / "p.parquet")],
        perturbation_reports=reports,
    )
    run_metric_sql(con, SQL)
    return con


def test_perturbation_floor_by_hand(floor_db):
    got = {
        r[0]: r[1:]
        for r in floor_db.execute(
            "SELECT metric, n_items, n_seeds, value, ci_low, ci_high, seed_min, seed_max "
            "FROM perturbation_floor WHERE method = 'w' AND lang = 'en'"
        ).fetchall()
    }
    # mc_only per item: noise0 [1,0,0,0], noise1 [0,1,0,1] -> seed means [.5,.5,0,.5] = 0.375,
    # the mean of the twins' rates 0.25 and 0.5
    n, seeds, value, lo, hi, smin, smax = got["mc_only"]
    assert (n, seeds, smin, smax) == (4, 2, 0.25, 0.5)
    assert value == pytest.approx(0.375)
    # a proportion's floor gets the Wilson interval of its seed-averaged count (1.5 of 4)
    from benchmark_illusion.metrics.exact import wilson

    assert (lo, hi) == pytest.approx(wilson(1.5, 4))
    assert floor_db.execute(
        "SELECT DISTINCT ci_method FROM perturbation_floor WHERE metric = 'mc_only'"
    ).fetchall() == [("wilson",)]
    # drop_open: dense right everywhere; noise0 [1,0,0,0], noise1 [0,1,1,1] -> every item 0.5:
    # pooling the twins' item values gives the interval [0.5, 0.5], where the twins' own
    # intervals (0.25 and 0.75 over four items) are wide
    assert got["drop_open"][2:5] == (pytest.approx(0.5), pytest.approx(0.5), pytest.approx(0.5))
    assert got["drop_open"][5:] == (0.25, 0.75)
    # drop_mc: noise0 none, noise1 i3 -> [0,0,.5,0] = 0.125
    assert got["drop_mc"][2] == pytest.approx(0.125)
    # drop_candidates: dense candidates [1,1,1,0], twins all right -> -0.25 per seed
    assert got["drop_candidates"][2] == pytest.approx(-0.25)
    # one language: the pooled rows are the language's
    pooled = floor_db.execute(
        "SELECT metric, value FROM perturbation_floor WHERE method = 'w' AND lang = 'all'"
    ).fetchall()
    assert {m: v for m, v in pooled} == pytest.approx({m: v[2] for m, v in got.items()})
    # no floor of the floor, nor of dense
    assert floor_db.execute(
        "SELECT DISTINCT method FROM perturbation_floor ORDER BY 1"
    ).fetchall() == [("w",)]


def test_the_floor_stands_beside_the_rates_and_the_noise_floor(floor_db):
    mc = {
        r[0]: r[1:]
        for r in floor_db.execute(
            "SELECT method, mc_only_rate, noise_floor, perturbation_floor, "
            "perturbation_floor_ci_low, perturbation_floor_ci_high, perturbation_seeds "
            "FROM mc_only WHERE lang = 'en'"
        ).fetchall()
    }
    assert mc["w"][:3] == (0.5, 0.0, pytest.approx(0.375)) and mc["w"][5] == 2
    assert mc["w"][3] <= 0.375 <= mc["w"][4]
    assert mc["dense"][2] is None and mc["noise0-w"][2] is None  # twins keep their own rows
    assert mc["noise1-w"][0] == 0.5
    sg = dict(
        floor_db.execute(
            "SELECT method || ' ' || format, perturbation_floor FROM support_gradient "
            "WHERE lang = 'en' AND method IN ('w', 'dense')"
        ).fetchall()
    )
    assert sg["w open"] == pytest.approx(0.5) and sg["w mc"] == pytest.approx(0.125)
    assert sg["dense open"] is None
    summary = {
        r[0]: r[1:]
        for r in floor_db.execute(
            "SELECT method, floor_sentence, vs_floor, floor_kind FROM report_summary "
            "WHERE lang = 'all'"
        ).fetchall()
    }
    floor, vs, kind = summary["w"]
    rate, twin = floor_db.execute(
        "SELECT mc_only_sentence_rate, perturbation_floor_sentence FROM mc_only "
        "WHERE method = 'w' AND lang = 'all'"
    ).fetchone()
    # the summary prints the paired difference, not the two rates: the size floor here
    assert kind == "size" and floor == pytest.approx(round(twin, 2))
    assert float(vs.split(" [")[0]) == pytest.approx(rate - twin, abs=0.006)
    assert summary["dense"] == (None, None, None)


def test_checkpoints_list_the_twins_with_their_measured_change(floor_db):
    got = {
        r[0]: r[1:]
        for r in floor_db.execute(
            "SELECT method, family, bits, weight_bits, seed, source_method, relative_change "
            "FROM checkpoints"
        ).fetchall()
    }
    assert got["noise0-w"] == ("perturbation", None, 16.0, 0, "w", 0.25)
    assert got["noise1-w"][:5] == ("perturbation", None, 16.0, 1, "w")
    assert got["noise1-w"][5] == pytest.approx(0.25 + 1e-7)
    assert got["w"][0] == "pruning" and got["w"][5] == pytest.approx(0.25)  # from the reports
    assert got["dense"][3:] == (None, None, None)


def test_twins_of_a_quantized_checkpoint_carry_no_bits(tmp_path):
    quant = [
        {**r, "method": "gptq", "structure": "int4-g128", "sparsity": 0.0, "bits": 4}
        for r in PRUNED
    ]
    twin = [
        {**r, "method": "noise0-gptq", "structure": "int4-g128", "sparsity": 0.0}
        for r in TWINS
        if r["method"] == "noise0-w"
    ]
    frame(DENSE + quant + twin).write_parquet(tmp_path / "g.parquet")
    frame(POOL).write_parquet(tmp_path / "p.parquet")
    con = duckdb.connect()
    create_views(
        con,
        [str(tmp_path / "g.parquet")],
        [selected_file(tmp_path, ["i1", "i2", "i3", "i4"])],
        [str(tmp_path / "p.parquet")],
    )
    run_metric_sql(con, SQL)
    assert dict(con.execute("SELECT method, family FROM checkpoints").fetchall()) == {
        "dense": "dense",
        "gptq": "quantization",
        "noise0-gptq": "perturbation",
    }
    rows = con.execute(
        "SELECT method, bits, perturbation_floor FROM mc_only WHERE lang = 'all' ORDER BY 1"
    ).fetchall()
    assert rows == [("dense", None, None), ("gptq", 4, 0.25), ("noise0-gptq", None, None)]


# --- the DAG ----------------------------------------------------------------------------------


def dry_run(tmp_path, cfg: dict) -> dict[str, int]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [str(SNAKEMAKE), "-n", "--cores", "1", "-s", str(ROOT / "Snakefile")]
        + ["-d", str(tmp_path / "work"), "--configfile", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    return planned_jobs(out), out


def default_config() -> dict:
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["datasets"]["sample"]["path"] = str(ROOT / "resources/sample_qa/{lang}.json")
    return cfg


def test_default_config_plans_one_twin_and_its_evaluations_per_checkpoint_and_seed(tmp_path):
    cfg = default_config()
    p = cfg["pruning"]
    checkpoints = len(p["methods"]) * len(p["sparsities"])
    ctl = cfg["controls"]
    seeds = ctl["perturbation"]["seeds"]
    kinds = ctl["perturbation"]["match"]
    langs = len(cfg["datasets"]["sample"]["languages"])
    # the controls: forbid, and the placebo of the negative method's checkpoints
    placebos = len(p["sparsities"]) if ctl["negative"] else 0
    positive = int(ctl["positive"])
    jobs, out = dry_run(tmp_path, cfg)
    assert seeds and kinds == ["damage"]
    assert jobs["perturb"] == checkpoints * len(seeds) + placebos
    assert jobs["control"] == positive == 1
    assert jobs["evaluate"] == (1 + checkpoints * (1 + len(seeds)) + placebos + positive) * langs
    assert "results/checkpoints/smollm2-135m/damage0-wanda/unstructured/0.3" in out
    assert "results/checkpoints/smollm2-135m/placebo-wanda/unstructured/0.3" in out
    assert "results/checkpoints/smollm2-135m/forbid/none/0" in out
    assert (
        "results/generations/smollm2-135m/damage0-sparsegpt/unstructured/0.3/sample/de.parquet"
        in out
    )
    assert "results/calibration/smollm2-135m/damage.safetensors" in out
    # every kind: a size and a structure twin of every pruned checkpoint beside the damage one
    cfg["controls"]["perturbation"]["match"] = ["damage", "size", "structure"]
    every, out = dry_run(tmp_path, cfg)
    assert every["perturb"] == 3 * checkpoints * len(seeds) + placebos
    assert "noise0-wanda" in out and "mask0-sparsegpt" in out
    cfg["controls"] = {"perturbation": {"seeds": []}, "positive": False, "negative": None}
    off, out = dry_run(tmp_path, cfg)
    assert "perturb" not in off and "control" not in off
    assert off["evaluate"] == (1 + checkpoints) * langs
    assert "damage0" not in out and "forbid" not in out


# --- the real model ---------------------------------------------------------------------------


def test_a_twin_of_a_real_pruned_checkpoint_matches_it_and_evaluates(bundled_model_dir, tmp_path):
    from benchmark_illusion.compression.steps import prune_file
    from benchmark_illusion.config.validate import validate_config
    from benchmark_illusion.data import steps as datasteps
    from benchmark_illusion.evaluation.steps import EvalJob, evaluate_file
    from benchmark_illusion.models.checkpoints import load_checkpoint
    from benchmark_illusion.models.keys import CheckpointKey, Placement

    cfg = validate_config(
        {
            "models": {"smollm2-135m": {"source": "local", "path": str(bundled_model_dir)}},
            "datasets": {
                "sample": {
                    "source": "squad_json",
                    "path": str(ROOT / "resources/sample_qa/{lang}.json"),
                    "languages": ["en"],
                }
            },
            "evaluation": {"max_new_tokens": 8},
            "pruning": {"methods": ["magnitude"], "sparsities": [0.1]},
        },
        root=ROOT,
    )
    pruned = tmp_path / "magnitude"
    prune_file(
        bundled_model_dir,
        None,
        pruned,
        rule_params.prune(cfg, "smollm2-135m", "magnitude"),
        CheckpointKey(
            model="smollm2-135m", method="magnitude", structure="unstructured", sparsity=0.1
        ),
        Placement(device="cpu"),
    )
    twin_dir = tmp_path / "noise0-magnitude"
    from safetensors.torch import save_file

    tok = __import__("transformers").AutoTokenizer.from_pretrained(bundled_model_dir)
    text = (ROOT / "README.md").read_text()[:6000]
    ids = tok(text)["input_ids"][: 4 * 64]
    save_file({"input_ids": torch.tensor(ids).reshape(4, 64)}, str(tmp_path / "dmg.safetensors"))
    report = perturb_file(
        bundled_model_dir,
        pruned,
        twin_dir,
        rule_params.perturb(cfg, "smollm2-135m"),
        CheckpointKey(
            model="smollm2-135m", method="noise0-magnitude", structure="unstructured", sparsity=0.1
        ),
        tmp_path / "dmg.safetensors",
    )
    assert report["n_perturbed"] == 30 * 7  # every decoder Linear of the 30 blocks
    # both damages measured on the held-out text, the size twin's at scale 1
    assert report["damage_kl"] > 0 and report["source_damage_kl"] > 0
    assert report["scale"] == 1.0 and report["dense_nll"] > 0
    dense, _ = load_checkpoint(bundled_model_dir)
    source, _ = load_checkpoint(pruned)
    twin, _ = load_checkpoint(twin_dir)
    want, got = rel_changes(source, dense), rel_changes(twin, dense)
    changed = [n for n, r in want.items() if r > 0]
    assert len(changed) == 210
    for name in changed:
        assert got[name] == pytest.approx(want[name], abs=1e-6), name
    assert all(got[n] == 0 for n in want if n not in changed)  # lm_head (tied) as it was
    # and it evaluates like any checkpoint, logged with its own method and the source's key
    datasteps.download_dataset(rule_params.dataset(cfg, "sample"), "en", tmp_path / "raw.parquet")
    datasteps.build_items_file(
        tmp_path / "raw.parquet",
        tmp_path / "items.parquet",
        tmp_path / "report.json",
        seed=cfg["seed"],
        extractive=True,
        dataset="sample",
    )
    items = pl.read_parquet(tmp_path / "items.parquet").head(2)
    items.write_parquet(tmp_path / "two.parquet")
    logs = evaluate_file(
        EvalJob(
            twin_dir,
            tmp_path / "two.parquet",
            tmp_path / "eval.parquet",
            CheckpointKey(
                model="smollm2-135m",
                method="noise0-magnitude",
                structure="unstructured",
                sparsity=0.1,
            ),
            dataset="sample",
            lang="en",
            exemplars=tmp_path / "items.parquet",
        ),
        rule_params.evaluation(cfg),
        Placement(device="cpu"),
    )
    assert logs["method"].unique().to_list() == ["noise0-magnitude"]
    assert logs["structure"].unique().to_list() == ["unstructured"]
    assert logs["bits"].null_count() == logs.height and logs["item_id"].n_unique() == 2


def test_figures_draw_the_floor_and_no_panel_of_a_twin(tmp_path):
    import duckdb as db_

    from benchmark_illusion.metrics.figures.common import pruning_methods
    from benchmark_illusion.metrics.steps import make_figures
    from metrics.test_figures import assert_pngs, database

    grid = [
        ("wanda", "unstructured", 0.25),
        ("wanda", "unstructured", 0.5),
        ("noise0-wanda", "unstructured", 0.25, 0.1),
        ("noise0-wanda", "unstructured", 0.5, 0.2),
        ("rtn", "int4-g128", 0.0, 0.3),
        ("noise0-rtn", "int4-g128", 0.0, 0.1),
    ]
    path = database(tmp_path, grid)
    con = db_.connect(str(path), read_only=True)
    mc = con.sql("SELECT * FROM mc_only").pl()
    assert pruning_methods(mc) == ["wanda"]
    floor = mc.filter((pl.col("method") == "wanda") & (pl.col("lang") == "all")).sort("sparsity")
    assert floor["perturbation_floor"].to_list() == pytest.approx([1 / 6, 2 / 6])
    con.close()
    out = tmp_path / "figures"
    assert_pngs(make_figures(path, out), out)
