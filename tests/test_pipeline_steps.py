"""The pipeline steps read only their rule's params; selection and its seeded order.

A rule's params are Snakemake's re-run triggers, so a step that read a config key its params
do not carry would give stale results silently when that key changed. Here every step runs on
a tiny model with exactly the params its rule passes (benchmark_illusion.config.params, which
workflow/rules/inputs.smk calls), wrapped so that reading any other key raises.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
import torch
from safetensors.torch import load_file

from benchmark_illusion.compression.steps import calibration_file, prune_file, quantize_file
from benchmark_illusion.config import params as rule_params
from benchmark_illusion.config.validate import validate_config
from benchmark_illusion.data import steps as datasteps
from benchmark_illusion.evaluation.steps import EvalJob, eval_config_hash, evaluate_file
from benchmark_illusion.io import write_parquet
from benchmark_illusion.models.keys import CheckpointKey, Placement
from conftest import BUNDLED, ROOT, heavy_imports, make_tiny_model


class Strict(dict):
    """A params dict whose reads of absent keys fail, `.get` included (nested dicts too)."""

    def __init__(self, data: dict):
        super().__init__({k: Strict(v) if isinstance(v, dict) else v for k, v in data.items()})

    def __missing__(self, key):
        raise KeyError(f"{key!r} is read but not in the rule's params {sorted(self)}")

    def get(self, key, default=None):
        return self[key]


def test_strict_params_fail_on_any_absent_key():
    p = Strict({"a": 1, "b": {"c": 2}})
    assert p["a"] == 1 and p["b"].get("c") == 2
    for read in (lambda: p["x"], lambda: p.get("x", 0), lambda: p["b"].get("d")):
        with pytest.raises(KeyError, match="not in the rule's params"):
            read()


@pytest.fixture(scope="module")
def config():
    return validate_config(
        {
            "seed": 3,
            "models": {"tiny": dict(BUNDLED)},
            "datasets": {
                "sample": {
                    "source": "squad_json",
                    "path": str(ROOT / "resources/sample_qa/{lang}.json"),
                    "languages": ["en"],
                }
            },
            "items": {"pool_max": 6, "max_per_language": 4},
            "evaluation": {
                "max_new_tokens": 6,
                "batch_size": 4,
                "recovery": {
                    "beam": True,
                    "num_beams": 2,
                    "sample": True,
                    "num_samples": 2,
                    "oneshot": True,
                    "max_new_tokens": 4,
                    "scope": "all",
                },
            },
            "pruning": {"methods": ["magnitude", "wanda", "sparsegpt"], "sparsities": [0.25]},
            "quantization": {"methods": ["rtn", "gptq"], "bits": [3], "group_size": 32},
            "calibration": {"source": "heldout_items", "n_windows": 2, "seq_len": 16},
        },
        root=ROOT,
    )


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, bundled_tokenizer):
    """A tiny random Llama with the real tokenizer, saved as an imported model folder."""
    out = tmp_path_factory.mktemp("tiny") / "model"
    model = make_tiny_model(len(bundled_tokenizer), layers=2)
    model.config.eos_token_id = bundled_tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    bundled_tokenizer.save_pretrained(out)
    (out / "provenance.json").write_text(json.dumps({"source": "test"}))
    return out


@pytest.fixture(scope="module")
def item_file(tmp_path_factory, config):
    tmp = tmp_path_factory.mktemp("items")
    datasteps.download_dataset(
        Strict(rule_params.dataset(config, "sample")), "en", tmp / "raw.parquet"
    )
    datasteps.build_items_file(
        tmp / "raw.parquet",
        tmp / "items.parquet",
        tmp / "report.json",
        seed=config["seed"],
        extractive=config["datasets"]["sample"]["extractive"],
        dataset="sample",
    )
    return tmp / "items.parquet"


def test_evaluation_reads_only_its_params_and_hashes_them(config, tiny_dir, item_file, tmp_path):
    key, place = CheckpointKey("tiny"), Placement(device="cpu", threads=2)
    pool = evaluate_file(
        EvalJob(tiny_dir, item_file, tmp_path / "pool.parquet", key, "sample", "en", limit=6),
        Strict(rule_params.pool_evaluation(config)),
        place,
    )
    assert pool["item_id"].n_unique() == 6 and set(pool["decode"]) == {"greedy", "loglik"}
    items = pl.read_parquet(item_file).head(3)
    write_parquet(items, tmp_path / "three.parquet")
    full = evaluate_file(
        EvalJob(
            tiny_dir,
            tmp_path / "three.parquet",
            tmp_path / "eval.parquet",
            key,
            "sample",
            "en",
            exemplars=item_file,
        ),
        Strict(rule_params.evaluation(config)),
        place,
    )
    # scope all: every recovery decode ran on every item
    assert set(zip(full["format"], full["decode"], strict=True)) >= {
        ("open", "beam"),
        ("open", "sample"),
        ("oneshot", "greedy"),
    }
    # the pool and the evaluation carry one hash: recovery settings do not change greedy rows
    assert pool["config_hash"].unique().to_list() == full["config_hash"].unique().to_list()
    changed = rule_params.evaluation(
        {**config, "judge": {**config["judge"], "max_length_slack": 9}}
    )
    assert eval_config_hash(changed) != full["config_hash"][0]


def calibration_windows(config, tiny_dir, item_file, tmp_path):
    """The calibration_data step on its strict params: the windows file of the tiny model."""
    windows = tmp_path / "calibration.safetensors"
    calibration_file(
        Strict(rule_params.calibration(config)),
        config["seed"],
        tiny_dir,
        windows,
        item_files=[item_file],
        selected_files=[],
    )
    return windows


def test_calibration_and_every_pruning_method_read_only_their_params(
    config, tiny_dir, item_file, tmp_path
):
    windows = calibration_windows(config, tiny_dir, item_file, tmp_path)
    assert load_file(str(windows))["input_ids"].shape == (2, 16)
    for method in config["pruning"]["methods"]:
        report = prune_file(
            tiny_dir,
            None if method == "magnitude" else windows,
            tmp_path / method,
            Strict(rule_params.prune(config, "tiny", method)),
            CheckpointKey(model="tiny", method=method, structure="unstructured", sparsity=0.25),
            Placement(device="cpu"),
        )
        assert abs(report["measured_sparsity"] - 0.25) < 0.01
        assert (tmp_path / method / "sparsity.json").exists()


def test_quantize_reads_only_its_params_writes_an_on_grid_checkpoint_and_logs_bits(
    config, tiny_dir, item_file, tmp_path
):
    from benchmark_illusion.compression.quantization import distinct_per_group
    from benchmark_illusion.compression.structures import parse_grid
    from benchmark_illusion.models.checkpoints import load_checkpoint

    windows = calibration_windows(config, tiny_dir, item_file, tmp_path)
    dense, _ = load_checkpoint(tiny_dir)
    for method in config["quantization"]["methods"]:
        out = tmp_path / method / "int3-g32"
        report = quantize_file(
            tiny_dir,
            None if method == "rtn" else windows,
            out,
            Strict(rule_params.quantize(config, "tiny", method)),
            CheckpointKey(model="tiny", method=method, structure="int3-g32"),
            Placement(device="cpu"),
        )
        saved = json.loads((out / "quantization.json").read_text())
        assert saved["bits"] == 3 and saved["group_size"] == 32 and saved["off_grid_groups"] == 0
        assert saved["calibration_windows"] == (None if method == "rtn" else [2, 16])
        assert report["max_distinct_per_group"] <= 8
        assert json.loads((out / "provenance.json").read_text())["quantization"]["bits"] == 3
        net, _ = load_checkpoint(out)
        grid = parse_grid("int3-g32")
        for (name, w), (_, w0) in zip(
            net.named_parameters(), dense.named_parameters(), strict=True
        ):
            if "layers." in name and name.endswith("proj.weight"):  # every decoder Linear
                assert int(distinct_per_group(w, grid).max()) <= 8, name
                assert not torch.equal(w, w0), name
            else:  # embeddings, norms (and the tied lm_head) as they were
                assert torch.equal(w, w0), name
        logs = evaluate_file(
            EvalJob(
                out,
                item_file,
                tmp_path / method / "eval.parquet",
                CheckpointKey(model="tiny", method=method, structure="int3-g32"),
                dataset="sample",
                lang="en",
                limit=2,
            ),
            Strict(rule_params.pool_evaluation(config)),
            Placement(device="cpu"),
        )
        assert logs["bits"].unique().to_list() == [3]
        assert logs["structure"].unique().to_list() == ["int3-g32"]
        assert logs["sparsity"].unique().to_list() == [0.0]
    # a bad grid or a missing calibration file fails before the model is loaded
    with pytest.raises(ValueError, match="not a quantization structure"):
        quantize_file(
            tiny_dir,
            None,
            tmp_path / "x",
            Strict(rule_params.quantize(config, "tiny", "rtn")),
            CheckpointKey(model="tiny", method="rtn", structure="4bit"),
            Placement(device="cpu"),
        )
    with pytest.raises(ValueError, match="gptq needs calibration"):
        quantize_file(
            tiny_dir,
            None,
            tmp_path / "y",
            Strict(rule_params.quantize(config, "tiny", "gptq")),
            CheckpointKey(model="tiny", method="gptq", structure="int4-g32"),
            Placement(device="cpu"),
        )
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_prune_params_carry_method_settings_only_for_their_method(config):
    mag, wanda, sgpt = (
        rule_params.prune(config, "tiny", m) for m in ("magnitude", "wanda", "sparsegpt")
    )
    assert set(mag) == {"dtype", "tolerance"}
    assert set(wanda) == {"dtype", "tolerance", "batch_size"}
    assert set(sgpt) == {"dtype", "tolerance", "batch_size", "sparsegpt"}
    assert set(rule_params.quantize(config, "tiny", "rtn")) == {"dtype"}
    assert set(rule_params.quantize(config, "tiny", "gptq")) == {"dtype", "batch_size", "gptq"}
    for how in ("device", "decode_rows", "batch_tokens", "decode_tokens"):  # where, how fast
        assert how in config["evaluation"]
        assert how not in rule_params.evaluation(config)["evaluation"]
    assert "recovery" not in rule_params.pool_evaluation(config)["evaluation"]
    assert "languages" not in rule_params.dataset(config, "sample")


# ----------------------------------------------------------------- selection


def test_seeded_order_is_stable_when_ids_are_added_and_changes_with_the_seed():
    ids = [f"item-{i}" for i in range(50)]
    order = datasteps.seeded_order(ids, 7)
    assert sorted(order) == sorted(ids) and order != sorted(ids)
    grown = datasteps.seeded_order(ids + ["new-1", "new-2"], 7)
    assert [i for i in grown if i in set(ids)] == order  # adding items never reshuffles the others
    assert datasteps.seeded_order(list(reversed(ids)), 7) == order  # input order does not matter
    assert datasteps.seeded_order(ids, 8) != order


def pool_rows(outcomes: dict[str, tuple[bool, bool]]) -> pl.DataFrame:
    rows = []
    for item, (open_ok, mc_ok) in outcomes.items():
        rows.append({"item_id": item, "format": "open", "decode": "greedy", "correct": open_ok})
        rows.append({"item_id": item, "format": "candidates", "decode": "greedy", "correct": True})
        rows.append({"item_id": item, "format": "mc", "decode": "loglik", "correct": mc_ok})
        rows.append(
            {"item_id": item, "format": "open", "decode": "beam", "correct": True}
        )  # never counts
    return pl.DataFrame(rows)


def test_select_items_keeps_open_and_mc_correct_items_capped_in_seeded_order(tmp_path):
    outcomes = {f"q{i}": (i % 3 != 0, i % 4 != 0) for i in range(24)}
    both = [i for i, (o, m) in outcomes.items() if o and m]
    write_parquet(pool_rows(outcomes), tmp_path / "pool.parquet")
    write_parquet(
        pl.DataFrame({"item_id": list(outcomes), "question": ["?"] * 24}),
        tmp_path / "items.parquet",
    )
    info = datasteps.select_items_file(
        tmp_path / "pool.parquet",
        tmp_path / "items.parquet",
        tmp_path / "sel.parquet",
        cap=5,
        seed=11,
    )
    selected = pl.read_parquet(tmp_path / "sel.parquet")
    assert selected["item_id"].to_list() == sorted(datasteps.seeded_order(both, 11)[:5])
    assert info == {
        "pool": 24,
        "open_correct": 16,
        "mc_correct": 18,
        "both": len(both),
        "kept": 5,
        "cap": 5,
    }
    assert selected.columns == ["item_id", "question"]
    uncapped = datasteps.select_items_file(
        tmp_path / "pool.parquet",
        tmp_path / "items.parquet",
        tmp_path / "all.parquet",
        cap=100,
        seed=11,
    )
    assert uncapped["kept"] == len(both)


def test_evaluate_with_no_items_writes_an_empty_log_without_torch_or_a_model(tmp_path, config):
    """The evaluate script's early exit (a language where the dense model got nothing right):
    the log has the schema and no rows, and the check imports neither torch nor a model."""
    from benchmark_illusion.evaluation.schema import LOG_SCHEMA

    write_parquet(
        pl.DataFrame({"item_id": []}, schema={"item_id": pl.Utf8}), tmp_path / "e.parquet"
    )
    write_parquet(pl.DataFrame({"item_id": ["a"]}), tmp_path / "one.parquet")
    code = (
        "from benchmark_illusion.evaluation.schema import write_empty_log_if_no_items as f\n"
        f"print(f({str(tmp_path / 'e.parquet')!r}, {str(tmp_path / 'out.parquet')!r}),"
        f" f({str(tmp_path / 'one.parquet')!r}, {str(tmp_path / 'none.parquet')!r}))"
    )
    out, heavy = heavy_imports(code)
    assert out.split() == ["True", "False"] and heavy == set()
    out = pl.read_parquet(tmp_path / "out.parquet")
    assert out.height == 0 and dict(out.schema) == LOG_SCHEMA
    assert not (tmp_path / "none.parquet").exists()
    # the library entry point takes the same exit, with no checkpoint to load
    df = evaluate_file(
        EvalJob(
            tmp_path / "no-such-checkpoint",
            tmp_path / "e.parquet",
            tmp_path / "lib.parquet",
            CheckpointKey(model="m"),
            dataset="d",
            lang="xx",
        ),
        rule_params.evaluation(config),
    )
    assert df.height == 0 and pl.read_parquet(tmp_path / "lib.parquet").height == 0


def test_select_items_needs_open_and_mc_and_writes_an_empty_table_when_none_qualify(tmp_path):
    write_parquet(pool_rows({"a": (True, False), "b": (False, True)}), tmp_path / "pool.parquet")
    write_parquet(pl.DataFrame({"item_id": ["a", "b"]}), tmp_path / "items.parquet")
    info = datasteps.select_items_file(
        tmp_path / "pool.parquet", tmp_path / "items.parquet", tmp_path / "s.parquet", cap=5, seed=1
    )
    assert info["kept"] == 0 and pl.read_parquet(tmp_path / "s.parquet").height == 0
    no_mc = pool_rows({"a": (True, True)}).filter(pl.col("format") != "mc")
    write_parquet(no_mc, tmp_path / "pool.parquet")
    with pytest.raises(ValueError, match="evaluation.formats must include open and mc"):
        datasteps.select_items_file(
            tmp_path / "pool.parquet",
            tmp_path / "items.parquet",
            tmp_path / "x.parquet",
            cap=5,
            seed=1,
        )


def test_the_light_rules_import_no_torch():
    """download_dataset, build_items, select_items, aggregate, competency_gaps and the figures
    run in processes of their own (locally and on SLURM): importing torch would add seconds to
    jobs that take a fraction of one. Their scripts import these modules."""
    import re

    light = ["download_dataset", "build_items", "select_items", "aggregate", "competency_gaps"]
    light += ["figures", "concept_figures"]
    modules = set()
    for rule in light:
        text = (ROOT / "workflow/scripts" / f"{rule}.py").read_text()
        # "from benchmark_illusion[.pkg] import x[ as y], z": the module pkg, and x and z where
        # they are modules of it rather than names in it
        for pkg, names in re.findall(
            r"^from (benchmark_illusion(?:\.\w+)*) import (.+)$", text, flags=re.M
        ):
            modules.add(pkg)
            for name in (n.split(" as ")[0].strip() for n in names.split(",")):
                where = ROOT / "src" / pkg.replace(".", "/") / name
                if where.with_suffix(".py").is_file() or where.is_dir():
                    modules.add(f"{pkg}.{name}")
    assert {
        "benchmark_illusion.data.steps",
        "benchmark_illusion.metrics.aggregate",
        "benchmark_illusion.metrics.steps",
        "benchmark_illusion.concepts.steps",
    } <= modules, modules
    _, heavy = heavy_imports(
        f"import importlib\nfor m in {sorted(modules)!r}: importlib.import_module(m)"
    )
    assert heavy == set()


def test_the_configured_pruning_tolerance_decides_the_check(config, tiny_dir, tmp_path):
    """pruning.tolerance reaches the sparsity check: 33 % of the tiny model's weights cannot be
    met exactly (the measured share misses it by about 3e-6), so the same pruning passes under a
    tolerance of 1e-5 and stops under 1e-7, naming the miss; a check left at its own default
    (0.001) would pass both."""
    import copy

    def prune(tolerance: float, out: str):
        cfg = copy.deepcopy(config)
        cfg["pruning"]["tolerance"] = tolerance
        return prune_file(
            tiny_dir,
            None,
            tmp_path / out,
            Strict(rule_params.prune(cfg, "tiny", "magnitude")),
            CheckpointKey(
                model="tiny", method="magnitude", structure="unstructured", sparsity=0.33
            ),
            Placement(device="cpu"),
        )

    report = prune(1e-5, "loose")
    miss = abs(report["measured_sparsity"] - 0.33)
    assert 1e-7 < miss < 1e-5 and report["tolerance"] == 1e-5
    with pytest.raises(ValueError, match="misses the target 0.33000 by"):
        prune(1e-7, "strict")
    assert not (tmp_path / "strict").exists()
