"""The block-by-block machinery that pruning and quantization share: the walk over a causal
LM's decoder blocks, the capture of block 0's inputs, the statistics hooks, and the float64
Hessian of a Linear's inputs with its inverse factor (SparseGPT and GPTQ).

The inputs of the first decoder block are captured with a forward pre-hook (whatever
arguments the model passes: hidden states, `position_embeddings`, masks, ...), so nothing
depends on a layer's argument list. For each block i: forward hooks on its Linear layers
accumulate the method's statistics over the calibration tokens, the Linears are compressed,
and the compressed block is re-run to produce the inputs of block i+1. Memory: the model plus
one block boundary's calibration activations. Embeddings and `lm_head` stay as they are.

Precision: the Hessian sums in float64 on `float64_device`, and its inverse factor is computed
at one thread on the CPU (LAPACK's blocked Cholesky differs in its last bits between thread
counts even in float64; pruning/sparsegpt.py's docstring says why that matters).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch import nn
from tqdm import tqdm


def float64_device(device: str | torch.device) -> torch.device:
    """Where the float64 statistics and scores of tensors on `device` are computed: on that
    device, except Apple's MPS, which has no float64 (the CPU then)."""
    device = torch.device(device)
    return torch.device("cpu") if device.type == "mps" else device


class Hessian:
    """Running H = 2 X X^T / n of one Linear layer's inputs, float64 [in, in] on the inputs'
    device (`float64_device`)."""

    def __init__(self, in_features: int, device):
        shape, home = (in_features, in_features), float64_device(device)
        self.sum = torch.zeros(shape, dtype=torch.float64, device=home)
        self.tokens = 0

    def add(self, x: torch.Tensor) -> None:
        """x: [..., in] inputs of the layer (any float dtype; products and sums in float64)."""
        x = x.reshape(-1, x.shape[-1]).to(self.sum.device, torch.float64)
        self.sum += x.T @ x
        self.tokens += x.shape[0]

    @property
    def value(self) -> torch.Tensor:
        return 2.0 * self.sum / max(self.tokens, 1)


@contextmanager
def one_thread_on_cpu(device: torch.device):
    """torch (and its LAPACK) at one thread for the block, on the CPU: a blocked Cholesky
    factor's last bits depend on the number of threads that share it."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def inverse_hessian_factor(h: torch.Tensor, percdamp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(U, dead): U the upper Cholesky factor of (H + damping)^-1, dead the [in] mask of
    H_jj = 0; U in float64, factorized at one thread on the CPU (`one_thread_on_cpu`)."""
    h = h.detach().to(torch.float64, copy=True)
    diag = torch.diagonal(h)
    dead = diag == 0
    diag[dead] = 1.0
    diag += percdamp * diag.mean()
    with one_thread_on_cpu(h.device):
        lower = torch.linalg.cholesky(h)
        h_inv = torch.cholesky_inverse(lower)
        return torch.linalg.cholesky(h_inv, upper=True), dead


class _Captured(Exception):
    """Raised by the pre-hook to stop the forward pass once block 0's inputs are known."""

    def __init__(self, args, kwargs):
        self.args, self.kwargs = args, kwargs


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of decoder blocks: the ModuleList with num_hidden_layers entries."""
    n = getattr(model.config, "num_hidden_layers", None)
    for _, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return module
    raise ValueError(f"cannot find the {n} decoder layers of {type(model).__name__}")


def prunable_linears(layer: nn.Module) -> dict[str, nn.Linear]:
    """The Linear layers of one block, by their name inside it."""
    return {name: m for name, m in layer.named_modules() if isinstance(m, nn.Linear)}


def _with_hidden(args, kwargs, hidden):
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


@torch.inference_mode()
def capture_block_inputs(model: nn.Module, windows: torch.Tensor, batch_size: int) -> list[tuple]:
    """(args, kwargs) that the first decoder block receives, one entry per calibration batch."""
    layers = decoder_layers(model)
    device = next(model.parameters()).device
    captured = []

    def stop(module, args, kwargs):
        raise _Captured(args, kwargs)

    handle = layers[0].register_forward_pre_hook(stop, with_kwargs=True)
    try:
        for i in range(0, windows.shape[0], batch_size):
            try:
                model(input_ids=windows[i : i + batch_size].to(device), use_cache=False)
            except _Captured as c:
                captured.append((c.args, c.kwargs))
    finally:
        handle.remove()
    return captured


def _block_output(out):
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.inference_mode()
def compress_blockwise(
    model: nn.Module,
    windows: torch.Tensor | None,
    batch_size: int,
    statistic: type | None,
    compress: Callable[[nn.Linear, object], dict],
    desc: str,
    progress: bool = True,
) -> dict[str, dict]:
    """Compress every Linear of every decoder block in place, block by block; return
    {full layer name: what `compress` reported for it}.

    statistic: None (no calibration data: `windows` unused), or a class built as
      statistic(in_features, device) with .add(x) that accumulates each Linear's inputs
      (`pruning.wanda.InputNorms`, `Hessian`). Block i's statistics come from its inputs as
      produced by the already compressed blocks 0..i-1.
    compress(linear, its statistic or None): changes linear.weight in place, returns a dict.
    Used by pruning (prune_model) and quantization (quantization.quantize_model).
    """
    layers = decoder_layers(model)
    if statistic is not None and (windows is None or windows.numel() == 0):
        raise ValueError(f"{desc}: needs calibration windows")
    inputs = capture_block_inputs(model, windows, batch_size) if statistic is not None else []
    prefix = _prefix(model, layers)
    reports: dict[str, dict] = {}
    bar = tqdm(total=len(layers), desc=desc, disable=not progress)
    for i, layer in enumerate(layers):
        linears = prunable_linears(layer)
        stats = _collect(layer, linears, inputs, statistic) if statistic is not None else {}
        for name, lin in linears.items():
            reports[f"{prefix}.{i}.{name}"] = compress(lin, stats.get(name))
        stats.clear()
        if statistic is not None:
            for j, (args, kwargs) in enumerate(inputs):
                out = _block_output(layer(*args, **kwargs))
                inputs[j] = _with_hidden(args, kwargs, out)
        bar.update(1)
    bar.close()
    return reports


def _prefix(model, layers) -> str:
    for name, module in model.named_modules():
        if module is layers:
            return name
    return "layers"


def _collect(layer, linears, inputs, statistic) -> dict:
    """Run the block on every calibration batch, accumulating each Linear's input statistics."""
    device = next(layer.parameters()).device
    stats = {name: statistic(lin.in_features, device) for name, lin in linears.items()}
    handles = [
        lin.register_forward_hook(lambda m, a, o, s=stats[name]: s.add(a[0]))
        for name, lin in linears.items()
    ]
    try:
        for args, kwargs in inputs:
            layer(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return stats
