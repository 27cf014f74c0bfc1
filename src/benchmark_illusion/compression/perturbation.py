"""The floors: the dense model changed by seeded noise of a compressed checkpoint's size or
damage, evaluated like any checkpoint, answers "would any change of this size (or of this much
damage) do this?". And the pipeline's two controls, built from the dense model.

For every pruned or quantized checkpoint (or variant) C, every kind of `controls.perturbation.match`
and every seed of `controls.perturbation.seeds`, a twin W' = W + s D per Linear the compression
changed, with a direction D per Linear and one scale s for the whole model:
  size (noise<seed>-<source>)   D = (r ||W||_F / ||N||_F) N, N standard normal noise drawn on the
                                CPU in float32 from a generator seeded with (seed, the Linear's
                                name), the seed of a replicate <method>-s<k>'s twin made from
                                (seed, k) (draw_seed); r = ||C - W||_F / ||W||_F that Linear's
                                relative change in C; s = 1: every changed Linear moves by
                                exactly the compression's relative Frobenius distance, in a
                                random direction.
  damage (damage<seed>-<source>) the same D; s found so that the twin's damage (mean next-token
                                KL divergence from the dense model on held-out text,
                                compression/damage.py) equals C's.
  structure (mask<seed>-<source>) D = -W * M, M a random mask with as many weights per Linear as C
                                zeroed there (random N of every M for an N:M source), from the same
                                seeded generator; s in [0, 1] found like damage's (s = 1 is the
                                random mask itself; a random mask that does less damage than C at
                                s = 1 is reported unmatched). Pruned sources only.
Linears the compression left as they were (embeddings, `lm_head`, norms, any Linear it did not
touch) stay bit for bit. Every twin's report (perturbation.json) holds its damage and its
source's, KL and NLL, and the scale.

Controls (docs/metrics.md "Controls"):
  forbid             positive: the dense weights with control.json; `evaluate` forbids every
                     decode (open, candidates, recovery) each gold's first token, mc scoring is
                     untouched. Built to show the illusion: must be flagged. Its damage is 0, so
                     its damage-matched floor is the dense model itself.
  placebo-<source>   negative: damage-matched noise (seed PLACEBO_SEED) at the source's damage,
                     evaluated as a compressed checkpoint and compared with the source's
                     damage twins (noise of the same damage, other seeds). Built not to show
                     it: must not be flagged.

A twin is named like a checkpoint (compression/names.py), in the pruned checkpoints' layout
(results/checkpoints/{model}/damage0-wanda/unstructured/0.3/), so `evaluate` and every table
treat it as one more checkpoint, keyed by (model, method, structure, sparsity).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path

log = logging.getLogger("benchmark_illusion")

REPORT = "perturbation.json"


def draw_seed(seed: int, source: str) -> int:
    """The seed a twin's noise is drawn from: the twin seed itself for the twin of a first
    replicate (a source with the plain method name) or of any other checkpoint, and for the twin
    of a replicate <method>-s<k> the first 8 bytes of sha256('seed|replicate|k'), 63 bits: the
    twins of a method's replicates are then independent draws of noise, not one direction at
    three scales."""
    from benchmark_illusion.compression.names import parse_replicate

    _, replicate = parse_replicate(source)
    if replicate is None:
        return int(seed)
    digest = hashlib.sha256(f"{int(seed)}|replicate|{replicate}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def noise_seed(seed: int, name: str) -> int:
    """The generator seed of one Linear: the first 8 bytes of sha256('seed|name'), 63 bits (a
    stable hash: the same on any machine and Python, unlike hash())."""
    digest = hashlib.sha256(f"{int(seed)}|{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def _tensor_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (one file, or a sharded index)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {k: folder / v for k, v in weight_map.items()}
    from safetensors import safe_open

    files = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as s:
            files.update({k: f for k in s.keys()})  # noqa: SIM118 (safe_open is no dict)
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {folder}")
    return files


def _read(files: dict[str, Path], name: str):
    from safetensors import safe_open

    with safe_open(str(files[name]), framework="pt") as s:
        return s.get_tensor(name)


def _norm(x) -> float:
    """Frobenius norm, summed in float64 (the same value at any thread count, to the last bits)."""
    return float(x.double().norm())


def _random_mask(shape, removed: int, nm: tuple[int, int] | None, g):
    """A bool mask of `shape` with `removed` True entries drawn from generator g: uniformly
    among all entries, or (nm = (N, M)) N random of every M consecutive inputs of a row."""
    import torch

    if nm is not None:
        n, m = nm
        scores = torch.rand(shape, generator=g, dtype=torch.float32).reshape(-1, m)
        idx = torch.topk(scores, n, dim=1, sorted=False).indices
        mask = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, idx, True)
        return mask.reshape(shape)
    numel = math.prod(shape)
    flat = torch.zeros(numel, dtype=torch.bool)
    flat[torch.randperm(numel, generator=g)[:removed]] = True
    return flat.reshape(shape)


def _directions(net, source_dir, seed: int, kind: str, nm=None) -> tuple[dict, list]:
    """Per changed Linear: (module, its dense weight in float32 on the CPU, the direction D,
    the source's relative change r, the share the source zeroed), and the unchanged names."""
    import torch
    from torch import nn

    files = _tensor_files(Path(source_dir))
    out, skipped = {}, []
    for name, module in net.named_modules():
        if not isinstance(module, nn.Linear) or f"{name}.weight" not in files:
            continue
        w = module.weight
        c = _read(files, f"{name}.weight")
        if c.shape != w.shape:
            raise ValueError(
                f"{name}: shape {tuple(c.shape)} in {source_dir}, {tuple(w.shape)} in the "
                "dense model: not a compressed copy of this model"
            )
        w32 = w.detach().to("cpu", torch.float32, copy=True)
        c32 = c.to(torch.float32)
        if torch.equal(w32, c32):
            skipped.append(name)
            continue
        w_norm = _norm(w32)
        target = _norm(c32 - w32) / w_norm
        g = torch.Generator(device="cpu").manual_seed(noise_seed(seed, name))
        zeroed = int(((c32 == 0) & (w32 != 0)).sum())
        if kind == "structure":
            direction = -w32 * _random_mask(w32.shape, zeroed, nm, g)
        else:
            noise = torch.randn(w32.shape, generator=g, dtype=torch.float32)
            direction = noise * (target * w_norm / _norm(noise))
        out[name] = (module, w32, direction, target, zeroed / w32.numel())
    if not out:
        raise ValueError(f"{source_dir} changes no Linear of the dense model: nothing to match")
    return out, skipped


def perturb_model(
    net,
    source_dir: str | Path,
    seed: int,
    kind: str = "size",
    *,
    measure=None,
    source_damage: dict | None = None,
    nm: tuple[int, int] | None = None,
) -> dict:
    """Perturb `net` (the dense model, changed in place) into the `kind` twin of the compressed
    checkpoint in `source_dir` and return the report.

    measure: s -> {'kl', 'nll'} of the model as it stands (damage.damage on the held-out
    windows); needed for damage and structure (the scale search), optional for size (its
    damage is then reported). source_damage: the source's {'kl', 'nll'} (the target).
    Report: per Linear the relative change it matched (`target`), the one measured on the
    stored weights (`measured`); overall values over the perturbed Linears (sqrt of summed
    squared distances over summed squared norms); the scale, the damage and the match.
    """
    import torch

    from benchmark_illusion.compression import damage as dmg  # torch: not at import

    if kind not in ("size", "damage", "structure"):
        raise ValueError(f"twin kind {kind!r}: size, damage or structure")
    if kind != "size" and (measure is None or source_damage is None):
        raise ValueError(f"a {kind} twin needs the damage measure and the source's damage")
    t0 = time.perf_counter()
    dirs, skipped = _directions(net, source_dir, seed, kind, nm)

    def apply(s: float):
        with torch.no_grad():
            for module, w32, d, _, _ in dirs.values():
                module.weight.copy_((w32 + d * s).to(module.weight.dtype))
        return measure(s) if measure is not None else None

    match = None
    if kind == "size":
        got = apply(1.0)
        scale = 1.0
        damage = got
    else:
        match = dmg.match_scale(
            apply, source_damage["kl"], max_scale=1.0 if kind == "structure" else dmg.MAX_SCALE
        )
        scale = match.scale
        damage = apply(scale)  # the weights are left at the chosen scale
    layers = {}
    num = den = num_target = 0.0
    for name, (module, w32, _, target, zeroed) in dirs.items():
        w_norm = _norm(w32)
        change = _norm(module.weight.detach().to("cpu", torch.float32) - w32)
        layers[name] = {
            "target": target,
            "measured": change / w_norm,
            "numel": module.weight.numel(),
            "source_zeroed": zeroed,
        }
        num += change**2
        num_target += (target * w_norm) ** 2
        den += w_norm**2
    report = {
        "seed": int(seed),
        "kind": kind,
        "noise": "random_mask" if kind == "structure" else "gaussian",
        "scale": float(scale),
        "layers": layers,
        "n_perturbed": len(layers),
        "unchanged": skipped,
        "relative_change": math.sqrt(num / den),
        "source_relative_change": math.sqrt(num_target / den),
        "seconds": time.perf_counter() - t0,
    }
    if kind == "size":
        report["max_abs_deviation"] = max(abs(v["measured"] - v["target"]) for v in layers.values())
    if damage is not None:
        report.update(damage_kl=damage["kl"], damage_nll=damage["nll"])
    if source_damage is not None:
        report.update(source_damage_kl=source_damage["kl"], source_damage_nll=source_damage["nll"])
    if match is not None:
        report.update(
            matched=match.matched,
            match_relative_error=match.relative_error,
            match_steps=match.steps,
        )
    return report


CONTROL = "control.json"


def control_of(checkpoint: str | Path) -> dict | None:
    """The control.json of a checkpoint folder, None for any other checkpoint."""
    p = Path(checkpoint) / CONTROL
    return json.loads(p.read_text()) if p.is_file() else None
