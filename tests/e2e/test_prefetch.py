"""Hub models and datasets are downloaded where the run starts (local rules) and the compute jobs
read them from the hub cache with no network: the real fetch and import code on a hub cache laid
out as huggingface_hub lays it out, holding the real bundled model, with HF_HUB_OFFLINE set."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from benchmark_illusion.models.sources import ModelSourceError
from benchmark_illusion.models.steps import fetch_hub_model, import_model
from benchmark_illusion.scheduling.cluster import parameter_count
from conftest import swap_two_tokens

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
SHA = "0123456789abcdef0123456789abcdef01234567"


def hub_cache_with(model_dir: Path, cache: Path, repo: str) -> Path:
    """The hub cache layout (models--org--name: refs/main -> snapshots/<sha>) holding the files
    of an imported model folder."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / SHA
    snap.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(SHA)
    for f in model_dir.iterdir():
        if f.name != "provenance.json":
            shutil.copy(f, snap / f.name)
    return snap


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_fetched_hub_model_imports_from_the_cache_to_the_same_weights(
    bundled_model_dir, offline_cache, tmp_path
):
    hub_cache_with(bundled_model_dir, offline_cache, "org/smol")
    cfg = {"source": "hub", "id": "org/smol", "dtype": "float32"}
    record = fetch_hub_model(cfg)
    assert record["commit"] == SHA and record["revision"] == "main"
    assert record["n_parameters"] > 100e6 and "model.safetensors" in record["files"]
    prov = import_model({**cfg, "fetched": record}, tmp_path / "imported")
    assert prov["commit"] == SHA and prov["ref"] == "org/smol"
    ours = load_file(tmp_path / "imported" / "model.safetensors")
    theirs = load_file(bundled_model_dir / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(ours[k].equal(theirs[k]) for k in ours)
    # a compute node that does not see the snapshot folder: a clear error, not a download
    moved = {**record, "snapshot": str(tmp_path / "elsewhere")}
    with pytest.raises(ModelSourceError, match="HF_HOME must be on a filesystem"):
        import_model({**cfg, "fetched": moved}, tmp_path / "imported2")


def test_a_model_missing_from_the_cache_offline_names_the_model(offline_cache):
    with pytest.raises(ModelSourceError, match="org/absent is not in the hub cache"):
        fetch_hub_model({"source": "hub", "id": "org/absent"})


def hub_run(tmp_path, hf: Path, models: dict):
    """The embedded default config with `models` and the shipped sample set, written to a file;
    the environment of an offline run on the hub cache `hf`; and the Snakemake command for a work
    folder. Returns (config, its path, work folder, env, command)."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["models"] = models
    cfg["datasets"]["sample"]["path"] = str(ROOT / "resources/sample_qa/{lang}.json")
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "w"
    env = {**os.environ, "HF_HOME": str(hf), "HF_HUB_OFFLINE": "1"}
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "-d", str(work), "--configfile", str(path)]
    return cfg, path, work, env, cmd


def test_prefetch_downloads_models_and_datasets_and_nothing_else(bundled_model_dir, tmp_path):
    """`snakemake prefetch`: the hub model's record (its files in the hub cache) and every dataset
    language, no model job; a later plan then needs the network for nothing (no fetch job)."""
    hf = tmp_path / "hf"
    hub_cache_with(bundled_model_dir, hf / "hub", "org/smol")
    models = {"smol": {"source": "hub", "id": "org/smol", "params_b": 0.135}}
    cfg, path, work, env, cmd = hub_run(tmp_path, hf, models)
    res = subprocess.run(
        cmd + ["--cores", "1", "prefetch"], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    record = json.loads((work / "resources/hub/smol.json").read_text())
    assert record["commit"] == SHA and Path(record["snapshot"]).is_dir()
    langs = cfg["datasets"]["sample"]["languages"]
    assert sorted(p.stem for p in (work / "resources/datasets/sample").glob("*.parquet")) == sorted(
        langs
    )
    assert not (work / "resources/models").exists()
    # the record sizes the model's jobs from then on (the config's params_b aside)
    del cfg["models"]["smol"]["params_b"]
    n, where = parameter_count("smol", cfg["models"]["smol"], work)
    assert n == record["n_parameters"] and "fetched files" in where
    res = subprocess.run(cmd + ["-n"], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and "rule import_hub_model:" in res.stdout
    assert "rule fetch_hub_model:" not in res.stdout and "rule download_dataset:" not in res.stdout


def test_prefetch_fetches_hub_variants_and_their_tokenizer_is_checked_before_any_job(
    bundled_model_dir, tmp_path
):
    """A hub model with two hub variants: `prefetch` downloads all three (records under
    resources/hub/<model>/<variant>.json) and nothing else; a variant whose downloaded tokenizer
    differs from the base's (two ids swapped) then stops the next run before any job."""
    hf = tmp_path / "hf"
    for repo in ("org/smol", "org/smol-awq", "org/smol-other"):
        hub_cache_with(bundled_model_dir, hf / "hub", repo)
    swap_two_tokens(hf / "hub" / "models--org--smol-other" / "snapshots" / SHA)
    variants = {
        "awq": {"source": "hub", "id": "org/smol-awq", "method": "awq"},
        "other": {"source": "hub", "id": "org/smol-other", "method": "other"},
    }
    models = {"smol": {"source": "hub", "id": "org/smol", "params_b": 0.135, "variants": variants}}
    cfg, path, work, env, cmd = hub_run(tmp_path, hf, models)
    res = subprocess.run(
        cmd + ["--cores", "1", "prefetch"], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    for name in ("awq", "other"):
        record = json.loads((work / f"resources/hub/smol/{name}.json").read_text())
        assert record["id"] == f"org/smol-{name}" and record["commit"] == SHA
    assert not (work / "resources/models").exists() and not (work / "resources/variants").exists()
    res = subprocess.run(cmd + ["-n"], capture_output=True, text=True, env=env)
    assert res.returncode != 0
    assert (
        "models.smol.variants.other: its tokenizer differs from smol's" in res.stdout + res.stderr
    )
    del cfg["models"]["smol"]["variants"]["other"]
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run(cmd + ["-n"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "rule import_variant:" in res.stdout and "rule fetch_hub_variant:" not in res.stdout
