"""Sparse autoencoders (SAEs) on the dense model's residual stream, in SAELens' on-disk format.

An SAE folder holds `cfg.json` (SAELens' config dict: architecture, d_in, d_sae, k, metadata
with the hook name) and `sae_weights.safetensors` (W_enc [d_in, d_sae], b_enc [d_sae],
W_dec [d_sae, d_in], b_dec [d_in], and `threshold` for JumpReLU). SAELens' `SAE.load_from_disk`
reads the folders this module writes, and this module reads the folders SAELens writes for the
architectures it implements (topk, jumprelu, standard); others are loaded through SAELens
(`open_sae`, `SAELensAdapter`), as are published SAEs (`load_pretrained`).

Hook names follow SAELens / TransformerLens: `blocks.{L}.hook_resid_post` is the output of
decoder block L (0-based), `blocks.{L}.hook_resid_pre` its input (read by residual.py).

Related modules: residual.py reads the activations (and leaves out extreme-norm positions),
sae_train.py trains a TopK SAE and measures its fit, sae_build.py is the `sae` rule.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from benchmark_illusion.io import atomic_path

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
HOOK_RE = re.compile(r"^blocks\.(\d+)\.hook_resid_(pre|post)$")
NATIVE = ("topk", "jumprelu", "standard")
NATIVE_NORMALIZATION = ("none", "constant_norm_rescale")
SAELENS_FORMAT = "6.0.0"


class SAEError(ValueError):
    """An SAE that cannot be used as configured (bad hook, poor fit, unknown format)."""


class UnsupportedSAE(SAEError):
    """A valid SAELens SAE whose architecture or normalisation this module does not implement."""


def hook_name(layer: int, where: str = "post") -> str:
    return f"blocks.{layer}.hook_resid_{where}"


def parse_hook(name: str) -> tuple[int, str]:
    """'blocks.15.hook_resid_post' -> (15, 'post')."""
    m = HOOK_RE.match(name or "")
    if not m:
        raise SAEError(
            f"unsupported SAE hook {name!r}: only residual-stream hooks "
            "blocks.<L>.hook_resid_pre / blocks.<L>.hook_resid_post are supported"
        )
    return int(m.group(1)), m.group(2)


def topk_relu(pre: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The TopK activation: the k largest pre-activations of each row, ReLU'd, zeros elsewhere.

    Returns (acts [..., d_sae], vals [..., k], idx [..., k]): vals are the k pre-activations
    (before the ReLU) and idx their latents, in no particular order.
    """
    vals, idx = pre.topk(k, dim=-1, sorted=False)
    return torch.zeros_like(pre).scatter_(-1, idx, vals.relu()), vals, idx


class SparseAutoencoder(nn.Module):
    """SAELens-compatible SAE for inference and training (architectures topk, jumprelu, standard).

    encode(x) = act((x - b_dec * apply_b_dec_to_input) @ W_enc + b_enc), with act = ReLU of the
    k largest pre-activations (topk), ReLU gated by a per-latent threshold (jumprelu) or ReLU
    (standard); decode(a) = a @ W_dec + b_dec.
    """

    def __init__(
        self,
        d_in: int,
        d_sae: int,
        *,
        architecture: str = "topk",
        k: int | None = None,
        apply_b_dec_to_input: bool = True,
        normalize_activations: str = "none",
        metadata: dict | None = None,
    ):
        super().__init__()
        if architecture not in NATIVE:
            raise UnsupportedSAE(
                f"architecture {architecture!r} is not implemented here (only {', '.join(NATIVE)})"
            )
        if normalize_activations not in NATIVE_NORMALIZATION:
            raise UnsupportedSAE(
                f"normalize_activations {normalize_activations!r} is not implemented here"
            )
        if architecture == "topk" and not (k and 0 < k <= d_sae):
            raise SAEError(f"a topk SAE needs 0 < k <= d_sae, got k={k}, d_sae={d_sae}")
        self.d_in, self.d_sae, self.k = d_in, d_sae, k
        self.architecture = architecture
        self.apply_b_dec_to_input = apply_b_dec_to_input
        self.normalize_activations = normalize_activations
        self.metadata = dict(metadata or {})
        self.W_enc = nn.Parameter(torch.zeros(d_in, d_sae))
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.W_dec = nn.Parameter(torch.zeros(d_sae, d_in))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        if architecture == "jumprelu":
            self.threshold = nn.Parameter(torch.zeros(d_sae))

    @property
    def hook_name(self) -> str:
        return self.metadata.get("hook_name", "")

    @property
    def norm_threshold(self) -> float:
        """Positions with a residual norm above this are left out (inf: none are)."""
        return float(self.metadata.get("norm_threshold") or math.inf)

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.W_enc.dtype)
        if self.normalize_activations == "constant_norm_rescale":
            x = x * (self.d_in**0.5) / x.norm(dim=-1, keepdim=True)
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[..., d_in] -> [..., d_sae] latent activations (non-negative)."""
        pre = self.pre_activations(x)
        if self.architecture == "topk":
            return topk_relu(pre, self.k)[0]
        acts = pre.relu()
        if self.architecture == "jumprelu":
            acts = acts * (pre > self.threshold)
        return acts

    def decode(self, acts: torch.Tensor) -> torch.Tensor:
        out = acts @ self.W_dec + self.b_dec
        if self.normalize_activations == "constant_norm_rescale":
            raise SAEError(
                "decode of a constant_norm_rescale SAE needs the input norm; use reconstruct(x)"
            )
        return out

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        out = self.encode(x) @ self.W_dec + self.b_dec
        if self.normalize_activations == "constant_norm_rescale":
            out = out * x.norm(dim=-1, keepdim=True) / (self.d_in**0.5)
        return out

    def config_dict(self) -> dict:
        """SAELens' cfg.json for this SAE.

        metadata.sae_lens_version names the on-disk format (SAELens 6): without it SAELens reads
        the file as a pre-6 config and drops the metadata (hook name included).
        """
        cfg = {
            "architecture": self.architecture,
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "dtype": "float32",
            "device": "cpu",
            "apply_b_dec_to_input": self.apply_b_dec_to_input,
            "normalize_activations": self.normalize_activations,
            "reshape_activations": "none",
            "metadata": {"sae_lens_version": SAELENS_FORMAT, **self.metadata},
        }
        if self.architecture == "topk":
            cfg.update(k=self.k, rescale_acts_by_decoder_norm=False)
        return cfg

    def save(self, path: str | Path) -> None:
        """Write the folder atomically (an interrupted save leaves no folder)."""
        with atomic_path(path) as tmp:
            tmp.mkdir(parents=True)
            self.write_into(tmp)

    def write_into(self, folder: Path) -> None:
        state = {k: v.detach().to(torch.float32).contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / WEIGHTS_FILE))
        (folder / CFG_FILE).write_text(json.dumps(self.config_dict(), indent=1))


def load_sae(path: str | Path) -> SparseAutoencoder:
    """Read an SAE folder in SAELens' on-disk format (architectures this module implements)."""
    path = Path(path)
    if not (path / CFG_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise SAEError(f"not an SAE folder (needs {CFG_FILE} and {WEIGHTS_FILE}): {path}")
    cfg = json.loads((path / CFG_FILE).read_text())
    arch = cfg.get("architecture", "standard")
    if cfg.get("rescale_acts_by_decoder_norm"):
        raise UnsupportedSAE(f"{path}: rescale_acts_by_decoder_norm SAEs are not implemented here")
    if cfg.get("reshape_activations", "none") != "none":
        raise SAEError(
            f"{path}: reshape_activations {cfg['reshape_activations']!r} "
            "is not a residual-stream SAE"
        )
    sae = SparseAutoencoder(
        int(cfg["d_in"]),
        int(cfg["d_sae"]),
        architecture=arch,
        k=cfg.get("k"),
        apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
        normalize_activations=cfg.get("normalize_activations") or "none",
        metadata=cfg.get("metadata") or {},
    )
    state = load_file(str(path / WEIGHTS_FILE))
    missing = set(sae.state_dict()) - set(state)
    if missing:
        raise SAEError(f"{path / WEIGHTS_FILE}: missing tensors {sorted(missing)}")
    sae.load_state_dict({k: state[k].to(torch.float32) for k in sae.state_dict()})
    return sae.eval()


def add_metadata(path: str | Path, metadata: dict) -> None:
    """Add keys to the metadata of an SAE folder's cfg.json (SAELens keeps unknown keys)."""
    cfg_path = Path(path) / CFG_FILE
    cfg = json.loads(cfg_path.read_text())
    cfg["metadata"] = {**(cfg.get("metadata") or {}), **metadata}
    cfg_path.write_text(json.dumps(cfg, indent=1))


# --------------------------------------------------------------------------------------------
# SAELens: published SAEs and the architectures this module does not implement


def load_pretrained(spec: dict):
    """A published SAE through SAELens: {release, sae_id} (hub) or {path} (a local SAELens
    folder)."""
    try:
        # Imported here: SAELens is an optional extra, needed only for SAEs this module cannot read.
        from sae_lens import SAE
    except ImportError as e:
        raise SAEError(
            "a pretrained SAE (models.<name>.sae) is loaded with SAELens, "
            "which is an optional extra: pip install 'benchmark-illusion[sae]'"
        ) from e
    if spec.get("path"):
        return SAE.load_from_disk(spec["path"], device="cpu")
    return SAE.from_pretrained(spec["release"], spec["sae_id"], device="cpu")


class SAELensAdapter:
    """A SAELens SAE seen through SparseAutoencoder's interface (encode, reconstruct, d_sae, k,
    metadata, hook_name, norm_threshold)."""

    def __init__(self, sae, metadata: dict):
        self.sae, self.metadata = sae, {**dict(sae.cfg.metadata.to_dict()), **metadata}
        self.d_sae = sae.cfg.d_sae
        self.k = getattr(sae.cfg, "k", None)

    @property
    def hook_name(self) -> str:
        return self.metadata["hook_name"]

    @property
    def norm_threshold(self) -> float:
        return float(self.metadata.get("norm_threshold") or math.inf)

    @torch.no_grad()
    def encode(self, x):
        return self.sae.encode(x.to(self.sae.W_enc.dtype)).float()

    @torch.no_grad()
    def reconstruct(self, x):
        return self.sae(x.to(self.sae.W_enc.dtype)).float()


def open_sae(folder: str | Path) -> SparseAutoencoder | SAELensAdapter:
    """The SAE of a `sae` rule output (its sae/ subfolder): natively when this module implements
    its architecture, through SAELens otherwise."""
    folder = Path(folder)
    sae_dir = folder / "sae" if (folder / "sae").is_dir() else folder
    try:
        return load_sae(sae_dir)
    except UnsupportedSAE:
        meta = json.loads((sae_dir / CFG_FILE).read_text()).get("metadata") or {}
        return SAELensAdapter(load_pretrained({"path": str(sae_dir)}), meta)
