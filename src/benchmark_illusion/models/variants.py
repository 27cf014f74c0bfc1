"""Compressed variants of a model made elsewhere: a GGUF quant ladder, an AWQ or GPTQ export, a
checkpoint pruned with another tool, listed under `models.<base>.variants.<name>`.

A variant is imported like a model (`resources/variants/<base>/<name>/`, safetensors) and
evaluated by the same `evaluate` rule on its base model's selected items, as the checkpoint
`<base>/<name>/variant/<sparsity>`: method = the variant's name, structure `variant`, sparsity
its `sparsity` key (0 when not given). Every table, figure and control treats it like a
checkpoint the pipeline made; `checkpoints.family` is 'variant'.

What the tables say about its size is measured, not taken from the config: `variant.json`
holds the share of exact zeros and the N:M pattern of the decoder's Linear weights, the
number of distinct values per group of 32 inputs (a quantization grid leaves at most 2^bits)
and, for a GGUF file, the bits per weight of its tensor table. The `sparsity`, `bits` and
`bits_per_weight` keys are kept as claims beside the measurements.

The variant's tokenizer must equal its base's (same tokens under the same ids): otherwise its
prompts and gold first-token ranks are not comparable. The config check compares them before
any job where both are on disk (GGUF files, local folders, a downloaded hub snapshot), and the
import compares the written tokenizer with the base model's again.

The top of this module is torch-free (the config check and the DAG read it); the import and
the measurement load torch when they run.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from benchmark_illusion.compression.methods import NAMES
from benchmark_illusion.models.sources import gguf_header

STRUCTURE = "variant"
REPORT = "variant.json"
# method names of the pipeline's own checkpoints: a variant may not take them
RESERVED = ("dense", *NAMES)
# keys of a variant that locate its weights (the rest label it or state claims)
SOURCE_KEYS = ("source", "package", "file", "path", "id", "revision", "trust_remote_code")
DISTINCT_GROUP = 32  # inputs per group when counting distinct values (the smallest GGUF block)
# a group counts for the bit width only when at most this many of its 32 values are zero: a
# pruned float group has few distinct values because it has few values, not because of a grid
MIN_NONZERO = 24
NM_GROUPS = (4, 8, 16)


class VariantError(ValueError):
    """A variant cannot be used: its tokenizer differs from its base's, or its name is taken."""


def variants(config: dict) -> list[tuple[str, str, dict]]:
    """(base model, variant name, variant config) of every variant in the config, sorted."""
    return [
        (m, v, spec)
        for m, mcfg in sorted(config.get("models", {}).items())
        for v, spec in sorted((mcfg.get("variants") or {}).items())
    ]


def sparsity_key(spec: dict) -> str:
    """How the variant's sparsity is spelled in its paths: its `sparsity` key, else 0."""
    return f"{float(spec.get('sparsity') or 0):g}"


def source_config(base: dict, spec: dict) -> dict:
    """The config models.import_model reads for a variant: its own source keys, the base
    model's dtype (and trust_remote_code unless the variant sets it)."""
    cfg = {k: spec[k] for k in SOURCE_KEYS if k in spec}
    cfg.setdefault("trust_remote_code", base.get("trust_remote_code", False))
    cfg["dtype"] = base.get("dtype", "float32")
    return cfg


def name_errors(model: str, name: str) -> list[str]:
    """Why a variant name cannot be a checkpoint method (empty when it can)."""
    key = f"models.{model}.variants.{name}"
    if name in RESERVED:
        return [f"{key}: '{name}' is the name of the pipeline's own checkpoints; rename it"]
    if re.match(r"^noise(0|[1-9][0-9]*)-", name):
        return [f"{key}: names starting with noise<seed>- are the perturbed twins'; rename it"]
    return []


# ------------------------------------------------------------------ tokenizers, torch-free


def gguf_tokens(path: str | Path) -> list[str]:
    """The token strings of a GGUF file's vocabulary (`tokenizer.ggml.tokens`), by id, read
    from the header alone (sources.gguf_header)."""
    key = "tokenizer.ggml.tokens"
    found = gguf_header(path, {key}, lists={key})
    if key not in found:
        raise VariantError(f"{path}: the GGUF file has no {key}")
    return found[key]


def folder_tokens(folder: str | Path) -> list[str] | None:
    """The token strings of a Hugging Face folder's tokenizer.json, by id (added tokens
    included); None when the folder has no tokenizer.json (e.g. a SentencePiece .model only)."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    spec = json.loads(path.read_text(encoding="utf-8"))
    by_id: dict[int, str] = {}
    vocab = spec.get("model", {}).get("vocab") or {}
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...] in id order
        by_id.update({i: piece for i, (piece, _) in enumerate(vocab)})
    else:
        by_id.update({i: t for t, i in vocab.items()})
    by_id.update({a["id"]: a["content"] for a in spec.get("added_tokens", [])})
    if not by_id:
        return None
    return [by_id.get(i) for i in range(max(by_id) + 1)]


def source_tokens(cfg: dict, root: Path = Path("."), hub_record: Path | None = None):
    """The vocabulary of a model or variant source, by id, where it can be read without a
    download: a GGUF file, a local folder, a hub model's downloaded snapshot (its record from
    fetch_hub_model). None when it cannot (not downloaded yet, no tokenizer.json)."""
    from benchmark_illusion.models.sources import ModelSourceError, resolve_gguf

    source = cfg.get("source")
    try:
        if source in ("gguf_package", "gguf_file"):
            gguf_cfg = dict(cfg)
            if source == "gguf_file":
                gguf_cfg["path"] = str(root / cfg["path"])
            return gguf_tokens(resolve_gguf(gguf_cfg))
        if source == "local":
            return folder_tokens(root / cfg["path"])
        if source == "hub" and hub_record is not None and hub_record.is_file():
            return folder_tokens(json.loads(hub_record.read_text())["snapshot"])
    except (ModelSourceError, OSError):
        return None  # a missing file is reported by the source checks
    return None


def vocabulary_difference(base: list[str], variant: list[str]) -> str | None:
    """None when both vocabularies are equal; else what differs first, in words."""
    if base == variant:
        return None
    if len(base) != len(variant):
        return f"{len(variant)} tokens against the base's {len(base)}"
    differ = [i for i, (a, b) in enumerate(zip(base, variant, strict=True)) if a != b]
    i = differ[0]
    return (
        f"{len(differ)} token ids differ, the first is id {i}: {variant[i]!r} against the "
        f"base's {base[i]!r}"
    )


def tokenizer_errors(config: dict, root: Path = Path(".")) -> list[str]:
    """A variant whose tokenizer differs from its base's, where both can be read now."""
    errors = []
    cache: dict[str, list[str] | None] = {}
    for model, name, spec in variants(config):
        if model not in cache:
            cache[model] = source_tokens(
                config["models"][model], root, root / "resources" / "hub" / f"{model}.json"
            )
        base = cache[model]
        if base is None:
            continue
        record = root / "resources" / "hub" / model / f"{name}.json"
        mine = source_tokens(spec, root, record)
        if mine is None:
            continue
        diff = vocabulary_difference(base, mine)
        if diff:
            errors.append(
                f"models.{model}.variants.{name}: its tokenizer differs from {model}'s ({diff}); "
                "a variant must use its base model's tokenizer (same tokens, same ids), else its "
                "prompts and gold ranks are not comparable"
            )
    return errors


# ------------------------------------------------------------------ measurement (torch)


def grid_bits(name: str | None) -> int | None:
    """Bits of a GGUF weight type's grid: Q4_0 -> 4, Q8_0 -> 8, IQ2_XXS -> 2, F16/BF16 -> 16."""
    if not name:
        return None
    m = re.match(r"^I?Q([0-9])", name)
    if m:
        return int(m.group(1))
    m = re.match(r"^B?F([0-9]+)$", name)
    return int(m.group(1)) if m else None


def linear_weights(model) -> list[tuple[str, object]]:
    """(name, weight) of the decoder's Linear layers: every nn.Linear but the output head."""
    import torch

    out = model.get_output_embeddings()
    return [
        (n, m.weight.detach())
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and m is not out
    ]


def measure(model) -> dict:
    """Sparsity, N:M pattern and grid of the decoder's Linear weights, from the values.

    sparsity      exact zeros / weights
    nm            'N:M' when every group of M consecutive inputs of every row keeps at most
                  N nonzeros (N < M; the smallest M of 4, 8, 16), else None
    max_distinct_per_32  the most distinct values in a group of 32 consecutive inputs, over the
                  groups with at least 24 nonzeros (None when there are none)
    bits          ceil(log2(max_distinct_per_32)) when that is at most 16 distinct values (a
                  grid of 4 bits or fewer), else None: 5- to 8-bit grids cannot be told from
                  floats in groups of 32, and their GGUF files say their bits themselves
    group_size    the widest group (32, 64, ... inputs, or the whole row) whose values stay within
                  2^bits distinct: the quantization group (None without bits)
    """
    import torch

    weights = linear_weights(model)
    total = zeros = 0
    max_nz = {m: 0 for m in NM_GROUPS}
    max_distinct = None
    for _, w in weights:
        w = w.float()
        total += w.numel()
        zeros += int((w == 0).sum())
        rows, cols = w.shape
        for m in NM_GROUPS:
            if cols % m == 0:
                nz = (w.reshape(rows, cols // m, m) != 0).sum(-1).max()
                max_nz[m] = max(max_nz[m], int(nz))
            else:
                max_nz[m] = m
        if cols % DISTINCT_GROUP == 0:
            g = w.reshape(-1, DISTINCT_GROUP)
            keep = (g != 0).sum(1) >= MIN_NONZERO
            if keep.any():
                s = torch.sort(g[keep], dim=1).values
                d = int((1 + (s[:, 1:] != s[:, :-1]).sum(1)).max())
                max_distinct = max(max_distinct or 0, d)
    sparsity = zeros / total if total else 0.0
    nm = next((f"{max_nz[m]}:{m}" for m in NM_GROUPS if max_nz[m] < m), None)
    bits = None
    if max_distinct is not None and max_distinct <= 16:
        bits = max(1, math.ceil(math.log2(max_distinct)))
    return {
        "n_linear": len(weights),
        "n_weights": total,
        "sparsity": round(sparsity, 6),
        "nm": nm,
        "max_distinct_per_32": max_distinct,
        "bits": bits,
        "group_size": _group_size(weights, bits) if bits else None,
    }


def _group_size(weights, bits: int) -> int | None:
    """The widest power-of-two group from 32 inputs, or the whole row (None: per output
    channel), whose every group holds at most 2^bits distinct values."""
    import torch

    levels = 2**bits
    best = DISTINCT_GROUP
    cols = min(w.shape[1] for _, w in weights)
    widths = [g for g in (64, 128, 256, 512, 1024, 2048, 4096) if g < cols] + [None]
    for g in widths:
        ok = True
        for _, w in weights:
            w = w.float()
            width = w.shape[1] if g is None else g
            if w.shape[1] % width:
                ok = False
                break
            s = torch.sort(w.reshape(-1, width), dim=1).values
            if int((1 + (s[:, 1:] != s[:, :-1]).sum(1)).max()) > levels:
                ok = False
                break
        if not ok:
            return best
        best = g
    return best


def weight_bits(report: dict) -> float:
    """Bits a decoder weight takes when stored, by the storage model of the `checkpoints` table:
    a GGUF file's own bits per weight; a grid's bits + one fp16 scale per group; N:M pruning
    (1 - s)(16 + log2 M); unstructured sparsity 16 (1 - s) + 1; else 16."""
    m = report["measured"]
    if report.get("gguf", {}).get("bits_per_weight"):
        return float(report["gguf"]["bits_per_weight"])
    if m["bits"]:
        cols = m["group_size"]
        return m["bits"] + (16 / cols if cols else 0.0)
    s = m["sparsity"]
    if m["nm"]:
        return (1 - s) * (16 + math.log2(int(m["nm"].split(":")[1])))
    if s > 0:
        return 16 * (1 - s) + 1
    return 16.0


def describe(name: str, spec: dict, measured: dict, gguf: dict | None) -> dict:
    """The variant.json record: what the config says (claims) and what was measured."""
    report = {
        "name": name,
        "method": spec["method"],
        "source": spec["source"],
        "sparsity_key": float(sparsity_key(spec)),
        "claimed": {k: spec.get(k) for k in ("sparsity", "bits", "bits_per_weight")},
        "measured": measured,
        "gguf": gguf or {},
    }
    report["weight_bits"] = round(weight_bits(report), 4)
    # the grid it is stored on: a GGUF file's weight type, else what the values show (a Q8_0 file
    # re-encoded from a 4-bit model stores 8 bits, and its values still show 4: measured_bits)
    report["bits"] = grid_bits((gguf or {}).get("weight_type")) or measured["bits"]
    return report


def claim_warnings(report: dict, tolerance: float = 0.01) -> list[str]:
    """Where the config's claims and the measurement disagree (logged, not fatal: the tables
    use the measurement)."""
    out = []
    c, m = report["claimed"], report["measured"]
    if c.get("sparsity") is not None and abs(c["sparsity"] - m["sparsity"]) > tolerance:
        out.append(f"sparsity {c['sparsity']} is claimed, {m['sparsity']:.4f} measured")
    bits = report["bits"]
    if c.get("bits") is not None and bits is not None and c["bits"] != bits:
        out.append(f"bits {c['bits']} are claimed, {bits} measured")
    bpw = report["gguf"].get("bits_per_weight")
    if c.get("bits_per_weight") is not None and bpw and abs(c["bits_per_weight"] - bpw) > 0.05:
        out.append(f"bits_per_weight {c['bits_per_weight']} are claimed, {bpw} measured")
    return out


def report_rows(paths) -> list[tuple]:
    """Rows of the `variants` table, one per variant folder (its variant.json) or file."""
    rows = []
    for p in paths:
        p = Path(p)
        r = json.loads((p / REPORT if p.is_dir() else p).read_text())
        m, g = r["measured"], r["gguf"]
        rows.append(
            (
                r["model"],
                r["name"],
                STRUCTURE,
                r["sparsity_key"],
                r["bits"],
                r["method"],
                r["source"],
                m["sparsity"],
                m["nm"],
                m["bits"],
                m["group_size"],
                m["max_distinct_per_32"],
                g.get("weight_type"),
                g.get("bits_per_weight"),
                r["weight_bits"],
                r["claimed"].get("sparsity"),
                r["claimed"].get("bits"),
                r["claimed"].get("bits_per_weight"),
            )
        )
    return rows


VARIANTS_TABLE = (
    "model VARCHAR, method VARCHAR, structure VARCHAR, sparsity DOUBLE, bits INTEGER, "
    "variant_method VARCHAR, source VARCHAR, measured_sparsity DOUBLE, nm VARCHAR, "
    "measured_bits INTEGER, "
    "group_size INTEGER, "
    "max_distinct_per_32 INTEGER, gguf_weight_type VARCHAR, gguf_bits_per_weight DOUBLE, "
    "weight_bits DOUBLE, claimed_sparsity DOUBLE, claimed_bits DOUBLE, "
    "claimed_bits_per_weight DOUBLE"
)
