"""llm-compressor side of `bench.py --only quant` (runs in benchmarks/.venv-llmc, not .venv).

Quantizes the imported safetensors folder with llm-compressor's `oneshot` and its GPTQModifier
(integer weights, one grid per group of `group_size` input columns, symmetric or not; lm_head
kept) on the calibration windows the pipeline made (a safetensors file holding `input_ids`
[n, seq_len]). Writes the weights every quantized Linear computes with (its weight passed
through llm-compressor's own fake quantization with the scale and zero point it chose, i.e. the
dequantized grid values), keyed by parameter name, and a JSON file with the wall time of
`oneshot` and the versions:

  python llmc_quant_worker.py MODEL_DIR WINDOWS.safetensors BITS GROUP_SIZE SYMMETRIC \
      OUT_WEIGHTS.safetensors OUT.json
"""

from __future__ import annotations

import importlib.metadata as md
import json
import sys
import time


def main() -> None:
    model_dir, windows_path, bits, group_size, symmetric, out_weights, out_json = sys.argv[1:8]
    import torch
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    ids = load_file(windows_path)["input_ids"]
    data = Dataset.from_dict(
        {"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()}
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    modifier = GPTQModifier(
        config_groups={
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": int(bits),
                    "type": "int",
                    "symmetric": symmetric == "true",
                    "strategy": "group",
                    "group_size": int(group_size),
                },
            }
        },
        ignore=["lm_head"],
        block_size=128,
        dampening_frac=0.01,
        actorder=None,
    )
    t0 = time.perf_counter()
    oneshot(
        model=model,
        dataset=data,
        recipe=modifier,
        num_calibration_samples=ids.shape[0],
        max_seq_length=ids.shape[1],
        shuffle_calibration_samples=False,
    )
    seconds = time.perf_counter() - t0
    weights = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            scheme = getattr(module, "quantization_scheme", None)
            if scheme is None or not hasattr(module, "weight_scale"):
                continue
            w = fake_quantize(
                module.weight, module.weight_scale, module.weight_zero_point, scheme.weights
            )
            weights[f"{name}.weight"] = w.detach().float().contiguous()
    save_file(weights, out_weights)
    versions = {
        p: md.version(p) for p in ("llmcompressor", "compressed-tensors", "transformers", "torch")
    }
    json.dump(
        {"seconds": seconds, "versions": versions, "quantized": len(weights)},
        open(out_json, "w"),
    )


if __name__ == "__main__":
    main()
