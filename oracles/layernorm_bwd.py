"""Oracle for specs/layernorm_bwd.yaml: dx, dweight, dbias of LayerNorm in float64, with the
given mean and rstd."""

import torch

DISTRIBUTIONS = ("normal",)
EPS = 1e-5


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    x = (0.5 + torch.randn(m, n, generator=g)).to(case.dtype)
    weight = (1.0 + 0.5 * torch.randn(n, generator=g)).to(case.dtype)
    dy = torch.randn(m, n, generator=g).to(case.dtype)
    xd = x.double()
    mean = xd.mean(-1)
    rstd = torch.rsqrt(xd.var(-1, unbiased=False) + EPS)   # what the forward saved
    return {"x": x.to(case.device), "weight": weight.to(case.device), "dy": dy.to(case.device),
            "mean": mean.float().to(case.device), "rstd": rstd.float().to(case.device)}


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    w = inputs["weight"].to(torch.float64)
    dy = inputs["dy"].to(torch.float64)
    mu = inputs["mean"].to(torch.float64).unsqueeze(-1)
    r = inputs["rstd"].to(torch.float64).unsqueeze(-1)
    xhat = (x - mu) * r
    g = dy * w
    a = g.mean(-1, keepdim=True)
    c = (g * xhat).mean(-1, keepdim=True)
    return {"dx": r * (g - a - xhat * c), "dweight": (dy * xhat).sum(0), "dbias": dy.sum(0)}


def check(inputs, outputs, case):
    outs = [outputs[k].to("cpu", torch.float64) for k in ("dx", "dweight", "dbias")]
    if not all(torch.isfinite(o).all() for o in outs):
        return ["finite: dx, dweight or dbias holds inf or NaN"]
    return []


def baseline(inputs, case):
    """What a user runs without regen: the backward in eager PyTorch, float32 math, with the mean
    and rstd the forward saved (autograd through torch's layer_norm would recompute them with an
    eps of its own: another function than this spec's whenever the model's eps differs)."""
    x, dy = inputs["x"].float(), inputs["dy"].float()
    w = inputs["weight"].float()
    mu, r = inputs["mean"].float().unsqueeze(-1), inputs["rstd"].float().unsqueeze(-1)
    xhat = (x - mu) * r
    g = dy * w
    a = g.mean(-1, keepdim=True)
    c = (g * xhat).mean(-1, keepdim=True)
    return {"dx": (r * (g - a - xhat * c)).to(inputs["x"].dtype),
            "dweight": (dy * xhat).sum(0).to(inputs["weight"].dtype),
            "dbias": dy.sum(0).to(inputs["weight"].dtype)}


def peers():
    """Liger-Kernel's and QuACK's LayerNorm backward: the forward in prepare (untimed), the
    backward through autograd."""
    def liger_prepare(inputs, case):
        from liger_kernel.transformers.functional import liger_layer_norm

        x = inputs["x"].detach().clone().requires_grad_(True)
        w = inputs["weight"].detach().clone().requires_grad_(True)
        b = torch.zeros_like(w).requires_grad_(True)
        with torch.enable_grad():
            y = liger_layer_norm(x, w, b, EPS)
        return {"y": y, "params": (x, w, b), "dy": inputs["dy"]}

    def quack_prepare(inputs, case):
        from quack.rmsnorm import layernorm_bwd, layernorm_fwd

        x, w = inputs["x"], inputs["weight"].float()
        _y, rstd, mean = layernorm_fwd(x, w, torch.zeros_like(w), eps=EPS, return_rstd=True,
                                       return_mean=True)
        return {"call": lambda: layernorm_bwd(x, w, inputs["dy"], rstd, mean, has_bias=True)}

    def autograd_backward(inputs, case):
        dx, dw, db = torch.autograd.grad(inputs["y"], inputs["params"], inputs["dy"],
                                         retain_graph=True)
        return {"dx": dx, "dweight": dw, "dbias": db}

    def quack(inputs, case):
        dx, dw, db = inputs["call"]()
        return {"dx": dx, "dweight": dw, "dbias": db}

    return {"liger": (liger_prepare, autograd_backward), "quack": (quack_prepare, quack)}
