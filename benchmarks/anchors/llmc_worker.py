"""llm-compressor side of `make bench` (runs in benchmarks/.venv-llmc, not .venv).

Prunes the imported safetensors folder with llm-compressor's `oneshot` (Wanda or SparseGPT,
unstructured) on the calibration windows the pipeline made (a safetensors file holding
`input_ids` [n, seq_len]), saves the pruned model uncompressed (dense safetensors with zeros),
and writes the wall time of `oneshot` and the versions to a JSON file:

  python llmc_worker.py MODEL_DIR WINDOWS.safetensors METHOD SPARSITY OUT_DIR OUT.json
"""

from __future__ import annotations

import importlib.metadata as md
import json
import sys
import time


def main() -> None:
    model_dir, windows_path, method, sparsity, out_dir, out_json = sys.argv[1:7]
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.obcq import SparseGPTModifier
    from llmcompressor.modifiers.pruning import WandaPruningModifier
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = load_file(windows_path)["input_ids"]
    data = Dataset.from_dict(
        {"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()}
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    modifier = {"wanda": WandaPruningModifier, "sparsegpt": SparseGPTModifier}[method](
        sparsity=float(sparsity), mask_structure="0:0", ignore=["re:.*lm_head"]
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
    model.save_pretrained(out_dir, save_compressed=False)
    tok.save_pretrained(out_dir)
    versions = {p: md.version(p) for p in ("llmcompressor", "transformers", "torch")}
    json.dump({"seconds": seconds, "versions": versions}, open(out_json, "w"))


if __name__ == "__main__":
    main()
