"""Damage: how far a changed model's next-token predictions moved from the dense model's, on
held-out text that is neither an evaluation item nor calibration text (results/calibration/
{model}/damage.safetensors, compression/calibration.py).

Two measures over every next-token position of the windows:
  kl   mean KL(p_dense || p_model): 0 for the dense model and for nothing else, and it grows with
       any change of the predictive distribution, whether the text's tokens get likelier or not.
       The damage-matched twins are matched on it.
  nll  mean negative log-likelihood of the text's next token (nats): reported beside it. A
       change can move the predictions a lot and the NLL little (mass moves among the tokens
       that were not the next one), so equal NLL is no equal damage.

`match_scale` finds the scale s of a direction D (W' = W + s D per Linear) whose damage equals a
target: a fixed-point step on the local power law kl ~ c s^2 inside a bracket that only shrinks,
a few forward passes on the held-out windows, never an evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# the scale search: a match within this relative KL error stops it
TOLERANCE = 0.02
MAX_STEPS = 14
MAX_SCALE = 64.0


@torch.inference_mode()
def log_probs(net, windows: torch.Tensor, batch: int = 4) -> list[torch.Tensor]:
    """Per batch of windows, the next-token log-probabilities [b, T - 1, V] in float32 on the
    model's device."""
    device = next(net.parameters()).device
    out = []
    for i in range(0, windows.shape[0], batch):
        ids = windows[i : i + batch].to(device)
        logits = net(input_ids=ids).logits[:, :-1, :].float()
        out.append(torch.log_softmax(logits, -1))
    return out


@torch.inference_mode()
def damage(net, windows: torch.Tensor, reference: list[torch.Tensor], batch: int = 4) -> dict:
    """{'kl', 'nll'} of `net` on `windows`, KL against the dense `reference` (log_probs of the
    dense model on the same windows and batches); sums in float64."""
    device = next(net.parameters()).device
    kl = nll = 0.0
    n = 0
    for j, i in enumerate(range(0, windows.shape[0], batch)):
        ids = windows[i : i + batch].to(device)
        lp = torch.log_softmax(net(input_ids=ids).logits[:, :-1, :].float(), -1)
        ref = reference[j]
        kl += float((ref.exp() * (ref - lp)).sum(-1).double().sum())
        nll -= float(lp.gather(-1, ids[:, 1:, None]).double().sum())
        n += ids.shape[0] * (ids.shape[1] - 1)
    return {"kl": kl / n, "nll": nll / n}


@dataclass
class Match:
    scale: float
    kl: float
    nll: float
    target: float
    steps: int
    matched: bool  # |kl - target| <= TOLERANCE * target (or the target is 0 and so is kl)

    @property
    def relative_error(self) -> float:
        return abs(self.kl - self.target) / self.target if self.target > 0 else abs(self.kl)


def match_scale(measure, target: float, max_scale: float = MAX_SCALE) -> Match:
    """The scale s in [0, max_scale] whose damage measure(s) -> {'kl', 'nll'} has kl == target.

    measure(0) is the dense model (kl 0); kl grows with s, about as s^2 for small s. From s = 1,
    each step moves s by sqrt(target / kl) (exact for kl = c s^2), clamped into the bracket of
    the scales seen below and above the target (a geometric midpoint when the step leaves it).
    Stops within TOLERANCE of the target, after MAX_STEPS, or when max_scale does too little
    damage (matched False: the closest scale is returned).
    """
    if target <= 0:
        d = measure(0.0)
        return Match(0.0, d["kl"], d["nll"], target, 1, d["kl"] == 0)
    lo, hi = 0.0, math.inf
    s = min(1.0, max_scale)
    best: Match | None = None
    for step in range(1, MAX_STEPS + 1):
        d = measure(s)
        m = Match(s, d["kl"], d["nll"], target, step, False)
        if best is None or m.relative_error < best.relative_error:
            best = m
        if m.relative_error <= TOLERANCE:
            m.matched = True
            return m
        if d["kl"] < target:
            lo = s
            if s >= max_scale:
                break  # the largest scale does less damage than the target
        else:
            hi = s
        proposal = min(s * math.sqrt(target / d["kl"]) if d["kl"] > 0 else 2 * s, max_scale)
        if not lo < proposal < hi:
            if hi == math.inf:
                proposal = min(2 * s, max_scale)
            else:
                proposal = hi / 2 if lo == 0 else math.sqrt(lo * hi)
        s = proposal
    best.steps = step
    return best
