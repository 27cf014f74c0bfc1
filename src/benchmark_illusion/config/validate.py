"""Config validation: schema (types, ranges, enums, defaults) first, then what a schema cannot see.

The Snakefile calls Snakemake's `validate` (which also fills in defaults) and then
`check_config`; both fail before any job starts, with messages that name the key. Code
outside Snakemake (tests, benchmarks, `python -m benchmark_illusion estimate`) uses
`load_config`, which does the same. The schema is the one home of every default: the checks here
read keys directly, after filling the defaults of whatever the caller left out
(`with_schema_defaults`).
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import jsonschema
import yaml
from jsonschema import Draft202012Validator, validators

from benchmark_illusion.compression.methods import CALIBRATED
from benchmark_illusion.compression.structures import parse_structure
from benchmark_illusion.data.loaders import HUB_LANGUAGES, load_raw
from benchmark_illusion.data.raw import DatasetError, raw_path_for
from benchmark_illusion.models.sources import (
    ModelSourceError,
    check_gguf,
    folder_listing,
    folder_problems,
    hub_id_problem,
    package_gguf,
    revision_problem,
)
from benchmark_illusion.models.variants import name_errors, source_config, tokenizer_errors

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The config is invalid; the message lists every problem, each naming its key."""


def key_path(parts) -> str:
    """'evaluation.batch_size' style path of a schema error."""
    return ".".join(str(p) for p in parts) or "<top level>"


def _with_defaults(cls):
    """A validator that fills in schema defaults while validating (as Snakemake's validate does)."""
    check_properties = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from check_properties(validator, properties, instance, schema)

    return validators.extend(cls, {"properties": set_defaults})


def schema_defaults(section: str = "", schema_path: Path = SCHEMA_PATH) -> dict:
    """The schema's default of every key under `section` (dotted, e.g. 'evaluation.recovery'),
    nested sections as dicts: the one home of every default (dataclasses must agree with it,
    tests/config/test_config.py checks)."""
    node = yaml.safe_load(Path(schema_path).read_text())
    for part in filter(None, section.split(".")):
        node = node["properties"][part]

    def defaults(n: dict) -> dict:
        out = {}
        for key, sub in n.get("properties", {}).items():
            if "properties" in sub:
                out[key] = defaults(sub)
            elif "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        return out

    return defaults(node)


def schema_errors(config: dict, schema_path: Path = SCHEMA_PATH) -> list[str]:
    """Every schema violation of `config`, as 'key.path: problem' lines (defaults filled in)."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = _with_defaults(Draft202012Validator)(schema)
    lines = []
    for err in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        # anyOf/oneOf errors carry their alternatives; the most specific one says more.
        leaf = jsonschema.exceptions.best_match(err.context) if err.context else err
        lines.extend(_error_lines(leaf))
    return list(dict.fromkeys(lines))  # `required` yields one error per missing key, each with all


def with_schema_defaults(config: dict, schema_path: Path = SCHEMA_PATH) -> dict:
    """A copy of `config` with every schema default filled in, as Snakemake's validate and
    validate_config fill them (schema errors are not reported here: schema_errors does that)."""
    config = copy.deepcopy(config)
    schema = yaml.safe_load(Path(schema_path).read_text())
    for _ in _with_defaults(Draft202012Validator)(schema).iter_errors(config):
        pass
    return config


def _error_lines(err) -> list[str]:
    """'key.path: problem' lines of one schema error; unknown and missing keys are named in the
    path."""
    path = list(err.absolute_path)
    instance = err.instance
    if (
        err.validator == "additionalProperties"
        and err.validator_value is False
        and isinstance(instance, dict)
    ):
        allowed = list(err.schema.get("properties", {}))
        return [
            f"{key_path(path + [k])}: unknown key (allowed keys: {', '.join(allowed)})"
            for k in instance
            if k not in allowed
        ]
    if err.validator == "required" and isinstance(instance, dict):
        # An if/then requirement depends on the source: say which one.
        why = (
            f" for source {instance['source']!r}"
            if "then" in err.schema_path and isinstance(instance.get("source"), str)
            else ""
        )
        return [
            f"{key_path(path + [k])}: required key is missing{why}"
            for k in err.validator_value
            if k not in instance
        ]
    if err.validator == "not" and err.validator_value == {"const": "all"}:
        return [
            f"{key_path(path)}: the name 'all' is reserved "
            "(it labels the pooled rows of the metric tables)"
        ]
    return [f"{key_path(path)}: {err.message}"]


def source_errors(key: str, m: dict, root: Path = Path(".")) -> list[str]:
    """Why the import cannot read a model's or variant's source (`key`: where it is in the
    config), where that shows without loading it: a missing package, file or folder; a GGUF
    file without the magic bytes or with an unreadable header; a `local` folder without
    config.json, safetensors weights or a tokenizer; a hub id or revision of the wrong form (the
    hub itself is asked only by the fetch job)."""
    src = m.get("source")
    if src == "gguf_package":
        try:
            path = package_gguf(m["package"], m.get("file"))
        except ModelSourceError as e:
            sub = "package" if "is not installed" in str(e) else "file"
            return [f"{key}.{sub}: {e}"]
        return _gguf_errors(f"{key}.file" if m.get("file") else f"{key}.package", path)
    if src == "gguf_file":
        path = root / m["path"]
        if not path.is_file():
            return [f"{key}.path: GGUF file not found: {m['path']}"]
        return _gguf_errors(f"{key}.path", path)
    if src == "local":
        folder = root / m["path"]
        if not folder.is_dir():
            return [f"{key}.path: model folder not found: {m['path']}"]
        problems = folder_problems(folder, bool(m.get("trust_remote_code")))
        if problems:
            return [
                f"{key}.path: model folder {m['path']}: {'; '.join(problems)} "
                f"({folder_listing(folder)})"
            ]
        return []
    if src == "hub":
        return hub_errors(key, m, "id")
    return []


def _gguf_errors(key: str, path: Path) -> list[str]:
    try:
        check_gguf(path)
    except (ModelSourceError, OSError) as e:
        return [f"{key}: {e}"]
    return []


def hub_errors(key: str, cfg: dict, id_key: str) -> list[str]:
    """A hub id (`cfg[id_key]`) and revision of the wrong form, keyed; no network."""
    errors = []
    repo = cfg.get(id_key)
    if isinstance(repo, str):
        problem = hub_id_problem(repo)
        if problem:
            errors.append(f"{key}.{id_key}: {problem}")
    revision = cfg.get("revision")
    if isinstance(revision, str):
        problem = revision_problem(revision)
        if problem:
            errors.append(f"{key}.revision: {problem}")
    return errors


def semantic_errors(config: dict, root: Path = Path(".")) -> list[str]:
    """Problems a schema cannot express: files and packages that do not exist, languages a hub
    set lacks, evaluation formats that item selection needs. Reads the schema's defaults where
    `config` leaves a key out (with_schema_defaults)."""
    config = with_schema_defaults(config)
    errors = []
    formats = config["evaluation"]["formats"]
    if not {"open", "mc"} <= set(formats):
        # select_items keeps the items the dense model answers in both formats.
        errors.append(
            f"evaluation.formats: must include open and mc, item selection needs both "
            f"(got {', '.join(formats)})"
        )
    if config["evaluation"]["engine"] == "vllm":
        from benchmark_illusion.evaluation.engines import missing_vllm_message, vllm_python

        if vllm_python() is None:
            errors.append(missing_vllm_message())
    missing = []
    for name, m in config.get("models", {}).items():
        missing += source_errors(f"models.{name}", m, root)
        for v, spec in m["variants"].items():
            missing += source_errors(f"models.{name}.variants.{v}", source_config(m, spec), root)
            errors += name_errors(name, v)
    errors += missing
    if not missing:  # the vocabularies of variants and their bases, once every file is there
        errors += tokenizer_errors(config, root)
    passages: dict[tuple[str, str], int] = {}
    errors += _dataset_errors(config, root, passages)
    configured = {
        lang for d in config.get("datasets", {}).values() for lang in d.get("languages", [])
    }
    for i, lang in enumerate(config["calibration"]["languages"] or []):
        if lang not in configured:
            errors.append(
                f"calibration.languages[{i}]: language {lang!r} is not a language of any dataset "
                f"(configured: {', '.join(sorted(configured))})"
            )
    errors += _pruning_errors(config["pruning"], config["calibration"], root)
    quant = config["quantization"]
    if quant["group_size"] == 0:
        errors.append(
            "quantization.group_size: 0 is not a group size: give the input columns per grid "
            "(>= 1), or -1 for one grid per output row"
        )
    if quant["methods"] and not quant["bits"]:
        errors.append("quantization.bits: methods are set but there is no bit width to quantize to")
    if config["calibration"]["source"] == "c4_hub":
        errors += hub_errors("calibration", config["calibration"], "hub_id")
    errors += _control_errors(config)
    errors += _concept_errors(config, root)
    if not errors:
        errors += _heldout_size_errors(config, passages)
    return errors


def _dataset_errors(config: dict, root: Path, passages: dict) -> list[str]:
    """A hub dataset's languages and id; a local dataset's file per language, read as the
    download job reads it (malformed JSON or Parquet, a missing column, text that is not UTF-8,
    no row of the language), each problem keyed `datasets.<name>.path`. Fills `passages` with
    the characters of each local (dataset, language)'s distinct passages, for the held-out
    calibration's size check."""
    errors = []
    for name, d in config.get("datasets", {}).items():
        src = d.get("source")
        if src in HUB_LANGUAGES:
            known = HUB_LANGUAGES[src]
            for lang in d.get("languages", []):
                if lang not in known:
                    errors.append(
                        f"datasets.{name}.languages: {src} has no language {lang!r} "
                        f"(known: {', '.join(sorted(known))})"
                    )
            errors += hub_errors(f"datasets.{name}", d, "hub_id")
        elif src is not None:
            for lang in d.get("languages", []):
                path = raw_path_for(d, lang)
                if not (root / path).is_file():
                    errors.append(
                        f"datasets.{name}.path: file for language {lang!r} not found: {path}"
                    )
                    continue
                try:
                    raw = load_raw({**d, "path": str(root / d["path"])}, lang)
                except DatasetError as e:
                    errors.append(f"datasets.{name}.path: {e}")
                    continue
                passages[name, lang] = sum(len(c) for c in set(raw["context"].to_list()))
    return errors


def _control_errors(config: dict) -> list[str]:
    """The negative control needs a compressed method of the grid and damage-matched twins."""
    controls = config["controls"]
    negative = controls["negative"]
    if negative is None:
        return []
    pert = controls["perturbation"]
    methods = list(config["pruning"]["methods"]) + list(config["quantization"]["methods"])
    errors = []
    if negative not in methods:
        errors.append(
            f"controls.negative: {negative!r} is no method of pruning.methods or "
            f"quantization.methods ({', '.join(methods) or 'none'}): the placebo copies the "
            "damage of that method's checkpoints"
        )
    if not pert["seeds"] or "damage" not in pert["match"]:
        errors.append(
            "controls.negative: the placebo is compared with its source's damage-matched twins; "
            "set controls.perturbation.seeds and keep damage in controls.perturbation.match"
        )
    return errors


def _concept_errors(config: dict, root: Path) -> list[str]:
    """concepts: settings that contradict each other, files that do not exist, a missing SAELens."""
    c = config["concepts"]
    if not c["enabled"]:
        return []
    errors = []
    sae = c["sae"]
    if sae["k"] > sae["width"]:
        errors.append(
            f"concepts.sae.k: {sae['k']} active latents per token is more than concepts.sae.width "
            f"({sae['width']})"
        )
    if not (sae["corpus"] or sae["text_files"]):
        errors.append(
            "concepts.sae.corpus: empty and no concepts.sae.text_files: "
            "the SAE has no text to train on"
        )
    configured = {
        lang for d in config.get("datasets", {}).values() for lang in d.get("languages", [])
    }
    for i, lang in enumerate(sae["languages"] or []):
        if lang not in configured:
            errors.append(
                f"concepts.sae.languages[{i}]: language {lang!r} is not a language of any dataset "
                f"(configured: {', '.join(sorted(configured))})"
            )
    for i, f in enumerate(sae["text_files"]):
        errors += _text_file(f"concepts.sae.text_files[{i}]", root, f)[1]
    gaps = c["gaps"]
    if gaps["under_quantile"] >= gaps["over_quantile"]:
        errors.append(
            f"concepts.gaps.under_quantile: {gaps['under_quantile']} must be below "
            f"concepts.gaps.over_quantile ({gaps['over_quantile']})"
        )
    labeler = c["labels"]["labeler"]
    if labeler and isinstance(labeler.get("model"), dict):
        errors += source_errors("concepts.labels.labeler.model", labeler["model"], root)
    for name, m in config.get("models", {}).items():
        spec = m.get("sae")
        if not spec:
            continue
        if importlib.util.find_spec("sae_lens") is None:
            errors.append(
                f"models.{name}.sae: a pretrained SAE is loaded with SAELens, "
                "which is not installed (pip install 'benchmark-illusion[sae]')"
            )
        if spec.get("path") and not (root / spec["path"]).is_dir():
            errors.append(f"models.{name}.sae.path: SAE folder not found: {spec['path']}")
    return errors


def _heldout_size_errors(config: dict, passages: dict[tuple[str, str], int]) -> list[str]:
    """Held-out calibration text comes from the datasets' passages: refuse a config whose local
    files hold fewer characters in all their passages than the tokens it asks for (a token
    covers at least one character; the exact count is checked when the windows are cut).
    `passages`: the characters of each (dataset, language)'s distinct passages (_dataset_errors)."""
    cal = config["calibration"]
    methods = list(config["pruning"]["methods"]) + list(config["quantization"]["methods"])
    needs = [m for m in methods if m in CALIBRATED]
    if cal["source"] != "heldout_items" or not needs:
        return []
    datasets = config.get("datasets", {})
    if any(d.get("source") in HUB_LANGUAGES for d in datasets.values()):
        return []  # passages are known only after download
    need = (cal["n_windows"] + cal["damage_windows"]) * cal["seq_len"]
    only = cal["languages"]
    chars = sum(n for (_, lang), n in passages.items() if only is None or lang in only)
    if chars < need:
        return [
            f"calibration: (n_windows + damage_windows) x seq_len = {need} tokens, "
            "but all passages of the configured datasets "
            f"hold only {chars} characters, and held-out calibration text is a part of them; lower "
            f"calibration.n_windows or calibration.seq_len, or use source text_files or c4_hub"
        ]
    return []


def nm_patterns(pruning: dict) -> list[str]:
    """The configured N:M patterns as 'N:M' strings (entries may be strings or
    {pattern, sparsity})."""
    return [e if isinstance(e, str) else e["pattern"] for e in pruning["nm"]]


def _pruning_errors(pruning: dict, calibration: dict, root: Path) -> list[str]:
    errors = []
    blocksize = pruning["sparsegpt"]["blocksize"]
    for i, entry in enumerate(pruning["nm"]):
        pattern = entry if isinstance(entry, str) else entry.get("pattern", "")
        try:
            st = parse_structure(pattern)
        except ValueError as e:
            errors.append(f"pruning.nm[{i}]: {e}")
            continue
        if (
            isinstance(entry, dict)
            and "sparsity" in entry
            and abs(entry["sparsity"] - st.sparsity) > 1e-9
        ):
            errors.append(
                f"pruning.nm[{i}].sparsity: {pattern} prunes N/M = {st.sparsity:g} of the weights, "
                f"not {entry['sparsity']:g}"
            )
        if "sparsegpt" in pruning["methods"] and blocksize % st.m:
            errors.append(
                f"pruning.sparsegpt.blocksize: {blocksize} "
                f"is not a multiple of M={st.m} ({pattern})"
            )
    if pruning["methods"] and not (pruning["sparsities"] or pruning["nm"]):
        errors.append(
            "pruning.sparsities: methods are set "
            "but there is no sparsity and no N:M pattern to prune to"
        )
    if calibration["source"] == "text_files":
        need = (calibration["n_windows"] + calibration["damage_windows"]) * calibration["seq_len"]
        chars = 0
        for j, p in enumerate(calibration.get("paths", [])):
            text, error = _text_file(f"calibration.paths[{j}]", root, p)
            errors += error
            chars += len(text)
        # A token covers at least one character, so fewer characters than tokens needed is
        # certainly too little (the exact count is checked when the windows are cut).
        if chars and chars < need:
            errors.append(
                f"calibration: (n_windows + damage_windows) x seq_len = {need} tokens, "
                f"but calibration.paths hold only {chars} characters"
            )
    return errors


def _text_file(key: str, root: Path, path: str) -> tuple[str, list[str]]:
    """A text file that the jobs read as UTF-8: (its text, []), or ('', [the keyed problem]) when
    it is missing or not UTF-8."""
    try:
        return (root / path).read_text(encoding="utf-8"), []
    except FileNotFoundError:
        return "", [f"{key}: file not found: {path}"]
    except UnicodeDecodeError as e:
        return "", [f"{key}: {path}: not UTF-8 text ({e})"]
    except OSError as e:
        return "", [f"{key}: {path}: cannot be read ({e})"]


def check_config(config: dict, root: Path = Path(".")) -> dict:
    """Raise ConfigError listing every semantic problem; return the config unchanged otherwise."""
    errors = semantic_errors(config, root)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    return config


def validate_config(config: dict, root: Path = Path("."), schema_path: Path = SCHEMA_PATH) -> dict:
    """Schema check with defaults filled in, then semantic checks; returns the completed config."""
    config = copy.deepcopy(config)
    errors = schema_errors(config, schema_path)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    return check_config(config, root)


def load_config(path: str | Path, root: Path | None = None) -> dict:
    """Read, validate and complete a YAML config file."""
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    return validate_config(config, root if root is not None else Path("."))
