"""Oracle for specs/swiglu_bwd.yaml: da and db of y = silu(a) * b, in float64."""

import torch

DISTRIBUTIONS = ("normal", "large")


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    a = torch.randn(m, n, generator=g) * 2
    if case.dist == "large":  # sigmoid's tails: exp(-a) overflows float32 for a < -88
        a = (torch.rand(m, n, generator=g) * 2 - 1) * 90
    b = torch.randn(m, n, generator=g)
    dy = torch.randn(m, n, generator=g)
    return {k: v.to(case.dtype).to(case.device) for k, v in (("a", a), ("b", b), ("dy", dy))}


def reference(inputs, case):
    a, b, dy = (inputs[k].to(torch.float64) for k in ("a", "b", "dy"))
    s = torch.sigmoid(a)
    return {"da": dy * b * s * (1 + a * (1 - s)), "db": dy * a * s}


def check(inputs, outputs, case):
    for k in ("da", "db"):
        if not torch.isfinite(outputs[k].to("cpu", torch.float64)).all():
            return [f"finite: {k} holds inf or NaN"]
    return []


def baseline(inputs, case):
    """What a user runs without regen: autograd through silu(a) * b in the storage dtype."""
    a = inputs["a"].detach().requires_grad_(True)
    b = inputs["b"].detach().requires_grad_(True)
    with torch.enable_grad():
        y = torch.nn.functional.silu(a) * b
        da, db = torch.autograd.grad(y, (a, b), inputs["dy"])
    return {"da": da, "db": db}


def peers():
    """Liger-Kernel's SwiGLU backward (LigerSiLUMulFunction): the forward in prepare (untimed),
    the backward through autograd (Liger recomputes silu and writes da, db)."""
    def liger_prepare(inputs, case):
        from liger_kernel.transformers.functional import liger_swiglu

        a = inputs["a"].detach().clone().requires_grad_(True)
        b = inputs["b"].detach().clone().requires_grad_(True)
        with torch.enable_grad():
            y = liger_swiglu(a, b)
        return {"y": y, "a": a, "b": b, "dy": inputs["dy"]}

    def liger(inputs, case):
        da, db = torch.autograd.grad(inputs["y"], (inputs["a"], inputs["b"]), inputs["dy"],
                                     retain_graph=True)
        return {"da": da, "db": db}

    return {"liger": (liger_prepare, liger)}
