"""Training a TopK SAE on residual-stream activations, and measuring its fit.

Training (`train_topk`, Gao et al. 2024): inputs scaled to unit mean squared norm per
dimension, TopK activation, the reconstruction loss normalised by the batch variance plus the
AuxK loss of the dead latents, Adam, decoder rows renormalised after every step. Activations
come from an ActivationStream: in memory when the corpus fits concepts.sae.buffer_tokens,
streamed from the model buffer by buffer otherwise.

Fit (`fit_stats`, `pca_fve`): the fraction of variance explained (FVE) on held-out positions,
the mean L0, the share of dead latents, and the FVE of PCA with as many components as k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm import tqdm

from benchmark_illusion.concepts.sae import SAEError, SparseAutoencoder, topk_relu


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
    seed           initialisation, batch order and held-out split (config `seed`)
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
    seed: int = 1234

    @classmethod
    def from_config(cls, sae: dict, seed: int) -> TrainSettings:
        """From config `concepts.sae` (schema-validated: every key present) and the run's seed."""
        return cls(
            **{name: sae[name] for name in cls.__dataclass_fields__ if name != "seed"},
            seed=int(seed),
        )


class ActivationStream:
    """Training positions of a corpus, streamed from the model in buffers.

    read(seq_indices) -> Activations for those sequences (positions already filtered).
    """

    def __init__(
        self, read, seq_indices: list[int], seq_tokens: list[int], buffer_tokens: int, seed: int
    ):
        self.read, self.seq_indices, self.seed = read, list(seq_indices), seed
        self.tokens = dict(zip(seq_indices, seq_tokens, strict=True))
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
        order = [
            self.seq_indices[i] for i in torch.randperm(len(self.seq_indices), generator=g).tolist()
        ]
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


def train_topk(
    stream: ActivationStream,
    d_in: int,
    s: TrainSettings,
    metadata: dict | None = None,
    progress: bool = True,
) -> tuple[SparseAutoencoder, list[dict]]:
    """Train a TopK SAE on the stream; returns it (scale folded into the weights) and a loss log.

    Inputs are scaled by one constant so the mean squared norm per dimension is 1; the scale is
    folded back afterwards (encode(x) is unchanged: W_enc/scale, b_dec*scale, W_dec*scale).
    b_dec starts at the mean activation, W_dec rows at random unit vectors, W_enc = W_dec^T.
    Decoder rows are renormalised to unit norm after every step.
    """
    torch.manual_seed(s.seed)
    sae, scale = _init_topk(next(stream.buffers(0)), d_in, s, metadata)
    opt = torch.optim.Adam(sae.parameters(), lr=s.lr, betas=(0.9, 0.999))
    since_fired = torch.zeros(s.width)
    history = []
    steps_per_epoch = None
    for epoch in range(s.epochs):
        total, err_sum, var_sum, n_steps = 0, 0.0, 0.0, 0
        bar = tqdm(
            total=steps_per_epoch,
            desc=f"SAE epoch {epoch + 1}/{s.epochs}",
            disable=not progress,
            mininterval=5,
        )
        for buf in stream.buffers(epoch):
            buf = buf / scale
            for start in range(0, len(buf) - s.batch_tokens + 1, s.batch_tokens):
                x = buf[start : start + s.batch_tokens]
                err, var, since_fired = _train_step(sae, opt, x, since_fired, s)
                err_sum += err
                var_sum += var
                total += len(x)
                n_steps += 1
                bar.update(1)
        bar.close()
        steps_per_epoch = n_steps
        history.append(
            {
                "epoch": epoch + 1,
                "positions": total,
                "train_fve": 1 - err_sum / max(var_sum, 1e-12),
                "dead_fraction": float((since_fired >= s.dead_tokens).float().mean()),
            }
        )
    _fold_scale(sae, scale)
    return sae.eval(), history


def _init_topk(
    first: torch.Tensor, d_in: int, s: TrainSettings, metadata: dict | None
) -> tuple[SparseAutoencoder, float]:
    """A TopK SAE initialised from the first buffer [n, d_in], and the input scale."""
    if len(first) < s.batch_tokens:
        raise SAEError(
            f"the SAE corpus has {len(first)} usable positions, fewer than one batch "
            f"({s.batch_tokens}); add text or lower concepts.sae.batch_tokens"
        )
    scale = float(first.pow(2).mean().sqrt())
    sae = SparseAutoencoder(d_in, s.width, architecture="topk", k=s.k, metadata=metadata)
    with torch.no_grad():
        w = torch.randn(s.width, d_in)
        sae.W_dec.copy_(w / w.norm(dim=-1, keepdim=True))
        sae.W_enc.copy_(sae.W_dec.T)
        sae.b_dec.copy_(first.mean(0) / scale)
    return sae, scale


def _train_step(
    sae: SparseAutoencoder,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    since_fired: torch.Tensor,
    s: TrainSettings,
) -> tuple[float, float, torch.Tensor]:
    """One optimiser step on the scaled batch x [batch_tokens, d_in].

    Returns the batch's squared reconstruction error and variance (before the step), and the
    updated positions since each latent last fired.
    """
    pre = sae.pre_activations(x)
    acts, vals, idx = topk_relu(pre, s.k)
    rec = acts @ sae.W_dec + sae.b_dec
    err = x - rec
    var = (x - x.mean(0)).pow(2).sum()
    loss = err.pow(2).sum() / var
    fired = torch.zeros(s.width, dtype=torch.bool)
    fired[idx[vals > 0]] = True
    since_fired = torch.where(fired, torch.zeros_like(since_fired), since_fired + len(x))
    dead = since_fired >= s.dead_tokens
    if s.aux_k and int(dead.sum()) > 0:
        loss = loss + s.aux_coef * _aux_loss(sae, pre, err, dead, s.aux_k)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.no_grad():
        sae.W_dec /= sae.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    return float(err.detach().pow(2).sum()), float(var.detach()), since_fired


def _aux_loss(
    sae: SparseAutoencoder, pre: torch.Tensor, err: torch.Tensor, dead: torch.Tensor, aux_k: int
) -> torch.Tensor:
    """AuxK loss: how well the aux_k most active dead latents reconstruct the (detached) error,
    relative to the error's variance."""
    ka = min(aux_k, int(dead.sum()))
    aux_acts = topk_relu(pre.masked_fill(~dead, -torch.inf), ka)[0]
    aux_rec = aux_acts @ sae.W_dec
    e = err.detach()
    aux = (e - aux_rec).pow(2).sum() / (e - e.mean(0)).pow(2).sum().clamp_min(1e-12)
    return torch.nan_to_num(aux)


def _fold_scale(sae: SparseAutoencoder, scale: float) -> None:
    """Fold the input scale into the weights: the SAE then reads unscaled activations."""
    with torch.no_grad():
        sae.W_enc /= scale
        sae.b_dec *= scale
        sae.W_dec *= scale


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
        xb = x[s : s + batch]
        a = sae.encode(xb)
        err += float((xb - sae.reconstruct(xb)).pow(2).sum())
        l0 += float((a > 0).sum())
        fired |= (a > 0).any(0)
    total = float((x - x.mean(0)).pow(2).sum())
    return {
        "fve": 1 - err / total if total > 0 else float("nan"),
        "l0": l0 / max(len(x), 1),
        "dead_fraction": float(1 - fired.float().mean()),
    }
