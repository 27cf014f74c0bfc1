"""Sparse autoencoders (SAEs) on the dense model's residual stream, in SAELens' on-disk format.

An SAE folder holds `cfg.json` (SAELens' config dict: architecture, d_in, d_sae, k, metadata
with the hook name) and `sae_weights.safetensors` (W_enc [d_in, d_sae], b_enc [d_sae],
W_dec [d_sae, d_in], b_dec [d_in], and `threshold` for JumpReLU). SAELens' `SAE.load_from_disk`
reads the folders this module writes, and this module reads the folders SAELens writes for the
architectures it implements (topk, jumprelu, standard); others are loaded through SAELens.

Hook names follow SAELens / TransformerLens: `blocks.{L}.hook_resid_post` is the output of
decoder block L (0-based), `blocks.{L}.hook_resid_pre` its input. Activations are read with a
forward hook (pre-hook) on that block, and the forward pass stops there.

Extreme-norm positions. SmolLM2 (like many LLMs) writes a huge vector into the residual stream
at the first position of every sequence (an "attention sink": norm ~25,000 against a median of
~150 at layer 15); such positions carry ~99% of the residual variance of a batch and no content.
Every position whose norm exceeds `norm_threshold` (default: 10 x the median token norm of the
corpus, stored in the SAE's metadata) is left out of training, of the FVE, and of the concept
activations of items.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .io import atomic_path

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
        raise SAEError(f"unsupported SAE hook {name!r}: only residual-stream hooks "
                       "blocks.<L>.hook_resid_pre / blocks.<L>.hook_resid_post are supported")
    return int(m.group(1)), m.group(2)


class SparseAutoencoder(nn.Module):
    """SAELens-compatible SAE for inference and training (architectures topk, jumprelu, standard).

    encode(x) = act((x - b_dec * apply_b_dec_to_input) @ W_enc + b_enc), with act = ReLU of the
    k largest pre-activations (topk), ReLU gated by a per-latent threshold (jumprelu) or ReLU
    (standard); decode(a) = a @ W_dec + b_dec.
    """

    def __init__(self, d_in: int, d_sae: int, *, architecture: str = "topk", k: int | None = None,
                 apply_b_dec_to_input: bool = True, normalize_activations: str = "none",
                 metadata: dict | None = None):
        super().__init__()
        if architecture not in NATIVE:
            raise UnsupportedSAE(f"architecture {architecture!r} is not implemented here (only {', '.join(NATIVE)})")
        if normalize_activations not in NATIVE_NORMALIZATION:
            raise UnsupportedSAE(f"normalize_activations {normalize_activations!r} is not implemented here")
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
            x = x * (self.d_in ** 0.5) / x.norm(dim=-1, keepdim=True)
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[..., d_in] -> [..., d_sae] latent activations (non-negative)."""
        pre = self.pre_activations(x)
        if self.architecture == "topk":
            vals, idx = pre.topk(self.k, dim=-1, sorted=False)
            return torch.zeros_like(pre).scatter_(-1, idx, vals.relu())
        acts = pre.relu()
        if self.architecture == "jumprelu":
            acts = acts * (pre > self.threshold)
        return acts

    def decode(self, acts: torch.Tensor) -> torch.Tensor:
        out = acts @ self.W_dec + self.b_dec
        if self.normalize_activations == "constant_norm_rescale":
            raise SAEError("decode of a constant_norm_rescale SAE needs the input norm; use reconstruct(x)")
        return out

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        out = self.encode(x) @ self.W_dec + self.b_dec
        if self.normalize_activations == "constant_norm_rescale":
            out = out * x.norm(dim=-1, keepdim=True) / (self.d_in ** 0.5)
        return out

    def config_dict(self) -> dict:
        """SAELens' cfg.json for this SAE.

        metadata.sae_lens_version names the on-disk format (SAELens 6): without it SAELens reads
        the file as a pre-6 config and drops the metadata (hook name included).
        """
        cfg = {"architecture": self.architecture, "d_in": self.d_in, "d_sae": self.d_sae,
               "dtype": "float32", "device": "cpu", "apply_b_dec_to_input": self.apply_b_dec_to_input,
               "normalize_activations": self.normalize_activations, "reshape_activations": "none",
               "metadata": {"sae_lens_version": SAELENS_FORMAT, **self.metadata}}
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
        raise SAEError(f"{path}: reshape_activations {cfg['reshape_activations']!r} is not a residual-stream SAE")
    sae = SparseAutoencoder(
        int(cfg["d_in"]), int(cfg["d_sae"]), architecture=arch, k=cfg.get("k"),
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
# Reading residual-stream activations


class _Stop(Exception):
    def __init__(self, hidden):
        self.hidden = hidden


class ResidualReader:
    """Residual-stream activations of a causal LM at one SAELens hook; the forward stops there."""

    def __init__(self, model: nn.Module, hook: str):
        from .pruning.layerwise import decoder_layers

        self.layer, self.where = parse_hook(hook)
        layers = decoder_layers(model)
        if self.layer >= len(layers):
            raise SAEError(f"hook {hook!r}: the model has {len(layers)} decoder layers (0..{len(layers) - 1})")
        self.model, self.block = model, layers[self.layer]

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[batch, seq, d_model] activations (float32) for right-padded input ids."""

        def post(_module, _args, output):
            raise _Stop(output[0] if isinstance(output, tuple) else output)

        def pre(_module, args, kwargs):
            raise _Stop(args[0] if args else kwargs["hidden_states"])

        handle = (self.block.register_forward_hook(post) if self.where == "post"
                  else self.block.register_forward_pre_hook(pre, with_kwargs=True))
        try:
            self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        except _Stop as s:
            return s.hidden.float()
        finally:
            handle.remove()
        raise SAEError(f"block {self.layer} was never reached in the forward pass")


def batches(seqs: list[list[int]], batch_size: int, pad_id: int, device="cpu"):
    """(index range, input_ids, attention_mask) of right-padded batches, in order."""
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start:start + batch_size]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, s in enumerate(chunk):
            ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, :len(s)] = 1
        yield range(start, start + len(chunk)), ids.to(device), mask.to(device)


@dataclass
class Activations:
    """Kept positions of a set of sequences: acts [n, d], and where each came from."""

    acts: torch.Tensor
    seq: torch.Tensor  # [n] sequence index
    pos: torch.Tensor  # [n] position in the sequence
    n_excluded: int    # positions left out for their norm

    def select(self, seq_indices: list[int], norm_threshold: float = math.inf) -> "Activations":
        """The positions of these sequences (renumbered 0.. in the given order) up to the norm
        threshold: what read_activations would return for them."""
        lookup = torch.full((int(self.seq.max()) + 1 if len(self.seq) else 1,), -1, dtype=torch.long)
        lookup[torch.tensor(seq_indices, dtype=torch.long)] = torch.arange(len(seq_indices))
        new = lookup[self.seq]
        wanted = new >= 0
        big = self.acts.norm(dim=-1) > norm_threshold
        keep = (wanted & ~big).nonzero(as_tuple=True)[0]
        keep = keep[torch.argsort(new[keep] * (int(self.pos.max()) + 1) + self.pos[keep], stable=True)]
        return Activations(self.acts[keep], new[keep], self.pos[keep], int((wanted & big).sum()))


def read_activations(reader: ResidualReader, seqs: list[list[int]], *, batch_size: int, pad_id: int,
                     norm_threshold: float = math.inf, device="cpu", progress: str | None = None,
                     keep: list[list[bool]] | None = None) -> Activations:
    """Activations of every position of `seqs` (optionally only where `keep` is true), minus
    positions whose norm exceeds norm_threshold."""
    from tqdm import tqdm

    acts, seq_idx, pos_idx, excluded = [], [], [], 0
    for rng, ids, mask in tqdm(list(batches(seqs, batch_size, pad_id, device)), desc=progress,
                               disable=progress is None, mininterval=5):
        h = reader(ids, mask).cpu()
        sel = mask.cpu().bool()
        if keep is not None:
            for i, j in enumerate(rng):
                sel[i, :len(keep[j])] &= torch.tensor(keep[j], dtype=torch.bool)
        big = h.norm(dim=-1) > norm_threshold
        excluded += int((sel & big).sum())
        sel &= ~big
        b, p = sel.nonzero(as_tuple=True)
        acts.append(h[b, p])
        seq_idx.append(b + rng.start)
        pos_idx.append(p)
    d = reader.model.config.hidden_size
    if not acts:
        return Activations(torch.zeros(0, d), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0)
    return Activations(torch.cat(acts), torch.cat(seq_idx), torch.cat(pos_idx), excluded)


def median_norm_threshold(reader: ResidualReader, seqs: list[list[int]], factor: float, *, batch_size: int,
                          pad_id: int, device="cpu") -> float:
    """factor x the median norm over every position of `seqs` (a reference sample)."""
    a = read_activations(reader, seqs, batch_size=batch_size, pad_id=pad_id, device=device)
    return norm_threshold(a, factor, len(seqs))


def _median(x: torch.Tensor) -> torch.Tensor:
    """The interpolated median (the mean of the two middle values for an even count), the one
    definition used everywhere; torch's .median() returns the lower of the two."""
    x = x.float().sort().values
    n = x.numel()
    return (x[(n - 1) // 2] + x[n // 2]) / 2


def norm_threshold(acts: Activations, factor: float, n_ref: int) -> float:
    """factor x the median norm of the positions of the first n_ref sequences of `acts`."""
    return float(factor * _median(acts.acts[acts.seq < n_ref].norm(dim=-1)))


# --------------------------------------------------------------------------------------------
# Fit quality


def fve(x: torch.Tensor, x_hat: torch.Tensor, mean: torch.Tensor | None = None) -> float:
    """Fraction of variance explained: 1 - sum ||x - x_hat||^2 / sum ||x - mean(x)||^2."""
    mean = x.mean(0) if mean is None else mean
    return float(1 - (x - x_hat).pow(2).sum() / (x - mean).pow(2).sum())


def pca_fve(train: torch.Tensor, test: torch.Tensor, n_components: int) -> float:
    """FVE on `test` of the best rank-n linear reconstruction fitted on `train` (PCA)."""
    mu = train.mean(0)
    _, _, v = torch.linalg.svd((train - mu).double(), full_matrices=False)
    basis = v[:n_components].T
    centered = (test - mu).double()
    rec = centered @ basis @ basis.T + mu.double()
    return fve(test.double(), rec, test.double().mean(0))


@torch.no_grad()
def fit_stats(sae: SparseAutoencoder, x: torch.Tensor, batch: int = 4096) -> dict:
    """FVE, mean L0 and the share of latents that never fire on x."""
    err = 0.0
    l0 = 0.0
    fired = torch.zeros(sae.d_sae, dtype=torch.bool)
    for s in range(0, len(x), batch):
        xb = x[s:s + batch]
        a = sae.encode(xb)
        err += float((xb - sae.reconstruct(xb)).pow(2).sum())
        l0 += float((a > 0).sum())
        fired |= (a > 0).any(0)
    total = float((x - x.mean(0)).pow(2).sum())
    return {"fve": 1 - err / total if total > 0 else float("nan"), "l0": l0 / max(len(x), 1),
            "dead_fraction": float(1 - fired.float().mean())}


# --------------------------------------------------------------------------------------------
# Training a TopK SAE


@dataclass(frozen=True)
class TrainSettings:
    """How a TopK SAE is trained (config `concepts.sae`).

    width          latents (d_sae)
    k              active latents per token
    epochs         passes over the training positions
    batch_tokens   positions per optimiser step
    lr             Adam learning rate (inputs are scaled to unit mean squared norm per dim)
    buffer_tokens  activations kept in memory: a corpus that fits is read once; a larger one is
                   streamed, buffer by buffer, in a new seeded order every epoch
    aux_k          dead latents that reconstruct the residual error (AuxK loss, Gao et al. 2024);
                   0 turns the auxiliary loss off
    aux_coef       weight of the AuxK loss
    dead_tokens    a latent that has not fired for this many training positions counts as dead
    seed           initialisation, batch order and held-out split
    """

    width: int = 4096
    k: int = 32
    epochs: int = 20
    batch_tokens: int = 1024
    lr: float = 1e-3
    buffer_tokens: int = 1_000_000
    aux_k: int = 256
    aux_coef: float = 1 / 32
    dead_tokens: int = 20_000
    seed: int = 0


class ActivationStream:
    """Training positions of a corpus, streamed from the model in buffers.

    read(seq_indices) -> Activations for those sequences (positions already filtered).
    """

    def __init__(self, read, seq_indices: list[int], seq_tokens: list[int], buffer_tokens: int, seed: int):
        self.read, self.seq_indices, self.seed = read, list(seq_indices), seed
        self.tokens = dict(zip(seq_indices, seq_tokens))
        self.buffer_tokens = buffer_tokens
        self.cached = None
        if sum(seq_tokens) <= buffer_tokens:
            self.cached = self.read(self.seq_indices).acts

    def buffers(self, epoch: int):
        """Shuffled [n, d] activation buffers covering every training position once."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        if self.cached is not None:
            yield self.cached[torch.randperm(len(self.cached), generator=g)]
            return
        order = [self.seq_indices[i] for i in torch.randperm(len(self.seq_indices), generator=g).tolist()]
        chunk, size = [], 0
        for s in order:
            chunk.append(s)
            size += self.tokens[s]
            if size >= self.buffer_tokens:
                acts = self.read(chunk).acts
                yield acts[torch.randperm(len(acts), generator=g)]
                chunk, size = [], 0
        if chunk:
            acts = self.read(chunk).acts
            yield acts[torch.randperm(len(acts), generator=g)]


def train_topk(stream: ActivationStream, d_in: int, s: TrainSettings, metadata: dict | None = None,
               progress: bool = True) -> tuple[SparseAutoencoder, list[dict]]:
    """Train a TopK SAE on the stream; returns it (scale folded into the weights) and a loss log.

    Inputs are scaled by one constant so the mean squared norm per dimension is 1; the scale is
    folded back afterwards (encode(x) is unchanged: W_enc/scale, b_dec*scale, W_dec*scale).
    b_dec starts at the mean activation, W_dec rows at random unit vectors, W_enc = W_dec^T.
    Decoder rows are renormalised to unit norm after every step.
    """
    from tqdm import tqdm

    torch.manual_seed(s.seed)
    first = next(stream.buffers(0))
    if len(first) < s.batch_tokens:
        raise SAEError(f"the SAE corpus has {len(first)} usable positions, fewer than one batch "
                       f"({s.batch_tokens}); add text or lower concepts.sae.batch_tokens")
    scale = float(first.pow(2).mean().sqrt())
    sae = SparseAutoencoder(d_in, s.width, architecture="topk", k=s.k, metadata=metadata)
    with torch.no_grad():
        w = torch.randn(s.width, d_in)
        sae.W_dec.copy_(w / w.norm(dim=-1, keepdim=True))
        sae.W_enc.copy_(sae.W_dec.T)
        sae.b_dec.copy_(first.mean(0) / scale)
    opt = torch.optim.Adam(sae.parameters(), lr=s.lr, betas=(0.9, 0.999))
    since_fired = torch.zeros(s.width)
    history = []
    steps_per_epoch = None
    for epoch in range(s.epochs):
        total, err_sum, var_sum, n_steps = 0, 0.0, 0.0, 0
        bar = tqdm(total=steps_per_epoch, desc=f"SAE epoch {epoch + 1}/{s.epochs}", disable=not progress,
                   mininterval=5)
        for buf in stream.buffers(epoch):
            buf = buf / scale
            for start in range(0, len(buf) - s.batch_tokens + 1, s.batch_tokens):
                x = buf[start:start + s.batch_tokens]
                pre = sae.pre_activations(x)
                vals, idx = pre.topk(s.k, dim=-1, sorted=False)
                acts = torch.zeros_like(pre).scatter(-1, idx, vals.relu())
                rec = acts @ sae.W_dec + sae.b_dec
                err = x - rec
                var = (x - x.mean(0)).pow(2).sum()
                loss = err.pow(2).sum() / var
                fired = torch.zeros(s.width, dtype=torch.bool)
                fired[idx[vals > 0]] = True
                since_fired = torch.where(fired, torch.zeros_like(since_fired), since_fired + len(x))
                dead = since_fired >= s.dead_tokens
                if s.aux_k and int(dead.sum()) > 0:
                    ka = min(s.aux_k, int(dead.sum()))
                    dead_pre = pre.masked_fill(~dead, -torch.inf)
                    av, ai = dead_pre.topk(ka, dim=-1, sorted=False)
                    aux_acts = torch.zeros_like(pre).scatter(-1, ai, av.relu())
                    aux_rec = aux_acts @ sae.W_dec
                    e = err.detach()
                    aux = (e - aux_rec).pow(2).sum() / (e - e.mean(0)).pow(2).sum().clamp_min(1e-12)
                    loss = loss + s.aux_coef * torch.nan_to_num(aux)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                with torch.no_grad():
                    sae.W_dec /= sae.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8)
                err_sum += float(err.detach().pow(2).sum())
                var_sum += float(var.detach())
                total += len(x)
                n_steps += 1
                bar.update(1)
        bar.close()
        steps_per_epoch = n_steps
        history.append({"epoch": epoch + 1, "positions": total, "train_fve": 1 - err_sum / max(var_sum, 1e-12),
                        "dead_fraction": float((since_fired >= s.dead_tokens).float().mean())})
    with torch.no_grad():
        sae.W_enc /= scale
        sae.b_dec *= scale
        sae.W_dec *= scale
    return sae.eval(), history
