"""Variants saved in llm-compressor's compressed-tensors format: a W4A16 pack-quantized checkpoint
of a tiny random Llama model, made with the compressed-tensors API (round-to-nearest scales from
each group's range, where llm-compressor would calibrate them), imported by
steps.import_variant as plain float weights; and a sparse-bitmask one, which compressed-tensors
>= 0.15 cannot decompress, refused instead of loaded with random weights."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from benchmark_illusion.models import steps
from benchmark_illusion.models.sources import ModelSourceError
from conftest import make_tiny_model

pytest.importorskip("compressed_tensors")

VOCAB = 64
GROUP = 32  # divides the tiny model's in_features (64 and 128)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )


def save_w4a16(model, out, tok) -> None:
    """What llm-compressor's save does: attach the scheme, set the scales, compress (int4 packed
    into int32 `weight_packed` + `weight_scale` + `weight_shape`), save, write the
    quantization_config (quant_method compressed-tensors, format pack-quantized)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationConfig,
        QuantizationStatus,
        apply_quantization_config,
        preset_name_to_scheme,
    )
    from compressed_tensors.quantization.utils import calculate_qparams

    scheme = preset_name_to_scheme("W4A16", ["Linear"])
    scheme.weights.group_size = GROUP
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"])
    apply_quantization_config(model, config)
    with torch.no_grad():
        for m in model.modules():
            if getattr(m, "quantization_scheme", None) is None:
                continue
            groups = m.weight.reshape(m.weight.shape[0], -1, GROUP)
            scale, _ = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights)
            m.weight_scale.copy_(scale)
            m.quantization_status = QuantizationStatus.FROZEN
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(out)
    tok.save_pretrained(out)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The tiny model's float folder (the base) and its W4A16 checkpoint, same tokenizer."""
    root = tmp_path_factory.mktemp("ct")
    tok = tiny_tokenizer()
    model = make_tiny_model(VOCAB)
    model.save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    save_w4a16(copy.deepcopy(model), root / "w4a16", tok)
    return root


def test_w4a16_checkpoint_is_what_llm_compressor_writes(folders):
    qc = json.loads((folders / "w4a16" / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "pack-quantized"
    assert qc["quantization_status"] == "compressed"
    assert qc["config_groups"]["group_0"]["weights"]["group_size"] == GROUP
    tensors = load_file(folders / "w4a16" / "model.safetensors")
    q = "model.layers.0.self_attn.q_proj"
    assert f"{q}.weight" not in tensors and tensors[f"{q}.weight_packed"].dtype == torch.int32
    assert tensors[f"{q}.weight_packed"].shape == (64, 64 * 4 // 32)


def test_import_variant_decompresses_a_w4a16_checkpoint_to_plain_weights(folders, tmp_path):
    """The import holds compressed-tensors' own decompression of every packed weight, each
    within half a quantization step of the float weight it was made from; its folder is a plain
    float one (no quantization_config, no packed tensors); the measurement reads 4 bits in
    groups of 32."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationScheme

    out = tmp_path / "imported"
    result = steps.import_variant(
        {"dtype": "float32"},
        {"source": "local", "path": str(folders / "w4a16"), "method": "w4a16"},
        out,
        folders / "base",
        model="tiny",
        name="w4a16",
    )
    measured = result["variant"]["measured"]
    assert (measured["bits"], measured["group_size"]) == (4, GROUP)
    assert result["variant"]["bits"] == 4 and result["variant"]["weight_bits"] == 4 + 16 / GROUP

    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    imported = load_file(out / "model.safetensors")
    assert all(k.endswith(".weight") for k in imported)
    packed = load_file(folders / "w4a16" / "model.safetensors")
    original = load_file(folders / "base" / "model.safetensors")
    qc = json.loads((folders / "w4a16" / "config.json").read_text())["quantization_config"]
    scheme = QuantizationScheme.model_validate(qc["config_groups"]["group_0"])
    compressor = BaseCompressor.get_value_from_registry("pack-quantized")
    names = [k.removesuffix(".weight_packed") for k in packed if k.endswith(".weight_packed")]
    assert len(names) == measured["n_linear"] == 2 * 7
    for name in names:
        state = {
            s: packed[f"{name}.{s}"] for s in ("weight_packed", "weight_scale", "weight_shape")
        }
        expected = compressor.decompress(state, scheme)["weight"]
        assert torch.equal(imported[f"{name}.weight"], expected)
        w = original[f"{name}.weight"]
        step = state["weight_scale"].repeat_interleave(GROUP, dim=1)
        assert ((imported[f"{name}.weight"] - w).abs() <= step / 2 + 1e-6).all()
        assert not torch.equal(imported[f"{name}.weight"], w)
    for name, tensor in original.items():  # embeddings and norms are not quantized
        if name.rsplit(".", 1)[0] not in names:
            assert torch.equal(imported[name], tensor)


def save_sparse_bitmask(model, out, tok) -> None:
    """The sparse-bitmask layout compressed-tensors <= 0.14 wrote (llm-compressor's sparse
    checkpoints): per decoder Linear the nonzero values, a bit-packed mask, row offsets, shape."""
    tensors = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and name != "lm_head":
            w = m.weight.detach()
            w = w * (w.abs() > w.abs().quantile(0.3))
            mask = (w != 0).to(torch.uint8).reshape(w.shape[0], -1, 8)
            bits = (mask << torch.arange(8, dtype=torch.uint8)).sum(-1, dtype=torch.uint8)
            nnz = (w != 0).sum(1)
            tensors[f"{name}.compressed"] = w[w != 0]
            tensors[f"{name}.bitmask"] = bits
            tensors[f"{name}.row_offsets"] = torch.cumsum(nnz, 0) - nnz
            tensors[f"{name}.shape"] = torch.tensor(w.shape)
    state = {
        k: v for k, v in model.state_dict().items() if k.rsplit(".", 1)[0] + ".shape" not in tensors
    }
    state.pop("lm_head.weight")  # tied to the embeddings
    model.save_pretrained(out, state_dict={**state, **tensors})
    tok.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "sparsity_config": {
            "format": "sparse-bitmask",
            "sparsity_structure": "unstructured",
            "targets": ["Linear"],
            "ignore": ["lm_head"],
        },
        "version": "0.14.0.1",
    }
    (out / "config.json").write_text(json.dumps(cfg))


def test_a_sparse_bitmask_checkpoint_is_refused_not_loaded_at_random(folders, tmp_path):
    """compressed-tensors >= 0.15 reads no sparse format: transformers would leave every Linear
    weight randomly initialised (the checkpoint holds `compressed`/`bitmask`, not `weight`) and
    only print a load report."""
    folder = tmp_path / "bitmask"
    save_sparse_bitmask(make_tiny_model(VOCAB), folder, tiny_tokenizer())
    with pytest.raises(ModelSourceError, match="sparse format 'sparse-bitmask'"):
        steps.import_variant(
            {"dtype": "float32"},
            {"source": "local", "path": str(folder), "method": "bitmask"},
            tmp_path / "imported",
            folders / "base",
            model="tiny",
            name="bitmask",
        )
    assert not (tmp_path / "imported").exists()


def test_the_config_check_refuses_a_sparse_bitmask_folder_before_any_job(folders, tmp_path):
    """The config check reads the quantization_config compressed-tensors writes: the
    sparse-bitmask folder is refused on one keyed line, the W4A16 one passes."""
    from benchmark_illusion.config.validate import source_errors

    folder = tmp_path / "bitmask"
    save_sparse_bitmask(make_tiny_model(VOCAB), folder, tiny_tokenizer())
    (line,) = source_errors("models.tiny.variants.b", {"source": "local", "path": str(folder)})
    assert line.startswith(f"models.tiny.variants.b.path: model folder {folder}: ")
    assert "sparse format 'sparse-bitmask'" in line
    w4a16 = {"source": "local", "path": str(folders / "w4a16")}
    assert source_errors("models.tiny.variants.w", w4a16) == []
