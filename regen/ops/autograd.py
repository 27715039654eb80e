"""Backward formulas for the ops that have a backward spec, registered with
torch.library.register_autograd so `loss.backward()` through regen ops runs the backward ops:

    rmsnorm    -> rmsnorm_bwd(x, weight, dy, rstd)           -> dx, dweight
    layernorm  -> layernorm_bwd(x, weight, dy, mean, rstd)   -> dx, dweight, dbias
    swiglu     -> swiglu_bwd(a, b, dy)                       -> da, db  (dx = [da | db])
    rope       -> rope_bwd(dy, cos, sin)                     -> dx
    cross_entropy -> cross_entropy_bwd(logits, targets)     -> d mean loss / d logits, written
                                                                over a copy of the logits

Each backward op is itself a regen op: it runs the verified artifact of the device's column, or
the oracle's baseline with a RegenOpsWarning saying why (regen/ops/dispatch.py), like any call.

The forward ops' specs return no statistics, so the row statistics a backward spec takes (rstd;
mean and rstd) are recomputed here from the saved input in float32: one extra read of x in the
backward. Gradients the backward specs do not give (rope's cos and sin tables, the targets) are
refused with an error if something asks for them, never returned as silent zeros.

Standalone (torch only), like dispatch.py: `regen export` ships it, so an exported package with
forward and backward columns trains as regen.ops does.
"""

from __future__ import annotations

# forward kernel -> backward kernel whose op its formula calls
PAIRS = {"rmsnorm": "rmsnorm_bwd", "layernorm": "layernorm_bwd", "swiglu": "swiglu_bwd",
         "rope": "rope_bwd", "cross_entropy": "cross_entropy_bwd"}


def _no_grad_for(op: str, ctx, names: dict[int, str]) -> None:
    for i, name in names.items():
        if ctx.needs_input_grad[i]:
            raise RuntimeError(f"{op}: no gradient for {name} (the backward spec gives none); "
                               f"pass {name} without requires_grad")


def _formulas(ops, label: str) -> dict:
    """kernel -> (setup_context, backward), calling the backward ops of `ops` (the namespace's
    torch.ops object, e.g. torch.ops.regen)."""
    import torch

    def rms_setup(ctx, inputs, output):
        x, weight, *params = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = params[0] if params else None

    def rms_backward(ctx, dy):
        x, weight = ctx.saved_tensors
        eps = ctx.eps if ctx.eps is not None else _default(ops.rmsnorm, "eps")
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + eps)
        dx, dweight = ops.rmsnorm_bwd(x, weight, dy.contiguous(), rstd)
        return dx, dweight, None

    def ln_setup(ctx, inputs, output):
        x, weight, _bias, *params = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = params[0] if params else None

    def ln_backward(ctx, dy):
        x, weight = ctx.saved_tensors
        eps = ctx.eps if ctx.eps is not None else _default(ops.layernorm, "eps")
        xf = x.float()
        mean = xf.mean(-1)
        rstd = torch.rsqrt(xf.var(-1, unbiased=False) + eps)
        dx, dweight, dbias = ops.layernorm_bwd(x, weight, dy.contiguous(), mean, rstd)
        return dx, dweight, dbias, None

    def swiglu_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def swiglu_backward(ctx, dy):
        (x,) = ctx.saved_tensors
        a, b = x.chunk(2, dim=-1)  # the spec's a and b are [M, N] tensors of their own
        da, db = ops.swiglu_bwd(a.contiguous(), b.contiguous(), dy.contiguous())
        return torch.cat([da, db], dim=-1)

    def rope_setup(ctx, inputs, output):
        _x, cos, sin = inputs
        ctx.save_for_backward(cos, sin)

    def rope_backward(ctx, dy):
        _no_grad_for(f"{label}.rope", ctx, {1: "cos", 2: "sin"})
        cos, sin = ctx.saved_tensors
        return ops.rope_bwd(dy.contiguous(), cos, sin), None, None

    def ce_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def ce_backward(ctx, dloss):
        _no_grad_for(f"{label}.cross_entropy", ctx, {1: "targets"})
        logits, targets = ctx.saved_tensors
        grad = logits.clone()  # cross_entropy_bwd writes d mean loss / d logits over its input
        ops.cross_entropy_bwd(grad, targets)
        return grad.mul_(dloss.reshape(()).to(grad.dtype)), None

    return {"rmsnorm": (rms_setup, rms_backward), "layernorm": (ln_setup, ln_backward),
            "swiglu": (swiglu_setup, swiglu_backward), "rope": (rope_setup, rope_backward),
            "cross_entropy": (ce_setup, ce_backward)}


def _default(packet, name: str):
    for arg in packet.default._schema.arguments:
        if arg.name == name:
            return arg.default_value
    raise KeyError(name)


def register(namespace: str, kernels, lib, label: str | None = None) -> list[str]:
    """Register the backward formula of every forward op in `kernels` whose backward op is there
    too; returns the forward kernels that got one."""
    import torch

    ops = getattr(torch.ops, namespace)
    formulas = _formulas(ops, label or namespace)
    done = []
    for fwd, bwd in PAIRS.items():
        if fwd in kernels and bwd in kernels:
            setup, backward = formulas[fwd]
            torch.library.register_autograd(f"{namespace}::{fwd}", backward,
                                            setup_context=setup, lib=lib)
            done.append(fwd)
    return done
