"""regen.patch(model): swap a model's RMSNorm, RoPE, SwiGLU, softmax and cross-entropy modules
for modules that call regen.ops, in place, sharing their parameters.

What is swapped: a module that names its kernel (`regen_kernel = "rmsnorm"`, ...; see
examples/llama.py for the contract each one follows), and torch's own nn.RMSNorm over the last
dimension, nn.Softmax(dim=-1) and nn.CrossEntropyLoss with default arguments. Everything else is
left as it is. Each replacement flattens leading dimensions to the spec's 2-D (or [B, S, H, D])
layout and makes its input contiguous; what regen.ops then runs (verified kernel or baseline) is
regen.ops' decision, per device, dtype and shape. Backward runs through the ops' autograd formulas
(regen/ops/autograd.py) where a backward spec exists (softmax has none: train with fused
attention).

Standalone (torch only): the replacements call the ops of a module named by its import name
("regen.ops", or an exported package such as "regen_kernels", whose patch() passes its own), so
`regen export` ships this file too and a patched model pickles.
"""

from __future__ import annotations

import sys

import torch
from torch import nn


class _OpsModule(nn.Module):
    """A replacement that calls the ops of the module named `ops` (imported when patched)."""

    def __init__(self, ops: str):
        super().__init__()
        self.ops = ops

    def _ops(self):
        return sys.modules[self.ops]


class RegenRMSNorm(_OpsModule):
    def __init__(self, weight: nn.Parameter, eps: float | None, ops: str = "regen.ops"):
        super().__init__(ops)
        self.weight, self.eps = weight, eps

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        n = x.shape[-1]
        y = self._ops().rmsnorm(x.reshape(-1, n).contiguous(), self.weight.to(x.dtype), eps)
        return y.view(x.shape)


class RegenSoftmax(_OpsModule):
    def forward(self, x):
        return self._ops().softmax(x.reshape(-1, x.shape[-1]).contiguous()).view(x.shape)


class RegenSwiGLU(_OpsModule):
    def forward(self, x):
        n = x.shape[-1] // 2
        return self._ops().swiglu(x.reshape(-1, 2 * n).contiguous()).view(*x.shape[:-1], n)


class RegenRoPE(_OpsModule):
    """For a rotary module with `cos`/`sin` buffers of [positions, D/2] applied to [B, S, H, D]."""

    def __init__(self, original: nn.Module, ops: str = "regen.ops"):
        super().__init__(ops)
        self.original = original

    def forward(self, x):
        s = x.shape[1]
        cos = self.original.cos[:s].to(x.dtype).contiguous()
        sin = self.original.sin[:s].to(x.dtype).contiguous()
        return self._ops().rope(x.contiguous(), cos, sin)


class RegenCrossEntropy(_OpsModule):
    """Mean over targets that are not -100; the loss is float32 (the spec's output)."""

    def forward(self, logits, targets):
        return self._ops().cross_entropy(logits.contiguous(), targets.contiguous()).view(())


def _replacement(module: nn.Module, ops: str) -> nn.Module | None:
    kind = getattr(module, "regen_kernel", None)
    if kind == "rmsnorm" or (isinstance(module, nn.RMSNorm) and len(module.normalized_shape) == 1
                             and module.weight is not None):
        return RegenRMSNorm(module.weight, getattr(module, "eps", None), ops)
    if kind == "softmax" or (isinstance(module, nn.Softmax) and module.dim == -1):
        return RegenSoftmax(ops)
    if kind == "swiglu":
        return RegenSwiGLU(ops)
    if kind == "rope":
        return RegenRoPE(module, ops)
    if kind == "cross_entropy" or (
            isinstance(module, nn.CrossEntropyLoss) and module.weight is None
            and module.ignore_index == -100 and module.reduction == "mean"
            and module.label_smoothing == 0.0):
        return RegenCrossEntropy(ops)
    return None


_KERNEL = {RegenRMSNorm: "rmsnorm", RegenSoftmax: "softmax", RegenSwiGLU: "swiglu",
           RegenRoPE: "rope", RegenCrossEntropy: "cross_entropy"}


def patch(model: nn.Module, ops: str = "regen.ops") -> dict[str, int]:
    """Replace the modules regen has kernels for, in place; returns how many of each kind.
    `ops`: the import name of the module whose ops the replacements call."""
    import importlib

    available = set(importlib.import_module(ops).kernels())
    counts: dict[str, int] = {}
    for parent in list(model.modules()):
        if isinstance(parent, RegenRoPE):  # already patched: its original stays inside it
            continue
        for name, child in list(parent.named_children()):
            new = _replacement(child, ops)
            if new is not None and _KERNEL[type(new)] not in available:
                new = None  # an exported package without this kernel: the module stays
            if new is not None:
                setattr(parent, name, new)
                kind = type(new).__name__.removeprefix("Regen")
                counts[kind] = counts.get(kind, 0) + 1
    return counts
