"""Oracle for specs/rmsnorm_bwd.yaml: dx and dweight of RMSNorm, in float64, with the given rstd."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    x = torch.randn(m, n, generator=g).to(case.dtype)
    weight = (1.0 + 0.5 * torch.randn(n, generator=g)).to(case.dtype)
    dy = torch.randn(m, n, generator=g).to(case.dtype)
    rstd = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6).float()   # what the forward saved
    return {"x": x.to(case.device), "weight": weight.to(case.device), "dy": dy.to(case.device),
            "rstd": rstd.to(case.device)}


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    w = inputs["weight"].to(torch.float64)
    dy = inputs["dy"].to(torch.float64)
    r = inputs["rstd"].to(torch.float64).unsqueeze(-1)
    xhat = x * r
    g = dy * w
    c = (g * xhat).mean(-1, keepdim=True)
    return {"dx": r * (g - xhat * c), "dweight": (dy * xhat).sum(0)}


def check(inputs, outputs, case):
    dx = outputs["dx"].to("cpu", torch.float64)
    dw = outputs["dweight"].to("cpu", torch.float64)
    if not (torch.isfinite(dx).all() and torch.isfinite(dw).all()):
        return ["finite: dx or dweight holds inf or NaN"]
    return []


def baseline(inputs, case):
    """What a user runs without regen: the backward in eager PyTorch, float32 math, with the
    rstd the forward saved (autograd through torch's rms_norm would recompute rstd with an eps
    of its own: another function than this spec's whenever the model's eps differs)."""
    x, dy = inputs["x"].float(), inputs["dy"].float()
    w, r = inputs["weight"].float(), inputs["rstd"].float().unsqueeze(-1)
    xhat = x * r
    g = dy * w
    c = (g * xhat).mean(-1, keepdim=True)
    return {"dx": (r * (g - xhat * c)).to(inputs["x"].dtype),
            "dweight": (dy * xhat).sum(0).to(inputs["weight"].dtype)}


def peers():
    """Liger-Kernel's and QuACK's RMSNorm backward. Each forward runs in prepare (untimed) so
    only the backward is timed, through autograd as their users call it."""
    def liger_prepare(inputs, case):
        from liger_kernel.transformers.functional import liger_rms_norm

        x = inputs["x"].detach().clone().requires_grad_(True)
        w = inputs["weight"].detach().clone().requires_grad_(True)
        with torch.enable_grad():
            y = liger_rms_norm(x, w, 1e-6, offset=0.0, casting_mode="gemma", in_place=False)
        return {"y": y, "x": x, "w": w, "dy": inputs["dy"]}

    def quack_prepare(inputs, case):
        from quack import rmsnorm

        x = inputs["x"].detach().clone().requires_grad_(True)
        w = inputs["weight"].detach().float().requires_grad_(True)
        with torch.enable_grad():
            y = rmsnorm(x, w, eps=1e-6)
        return {"y": y, "x": x, "w": w, "dy": inputs["dy"]}

    def backward(inputs, case):
        dx, dw = torch.autograd.grad(inputs["y"], (inputs["x"], inputs["w"]), inputs["dy"],
                                     retain_graph=True)
        return {"dx": dx, "dweight": dw}

    return {"liger": (liger_prepare, backward), "quack": (quack_prepare, backward)}
