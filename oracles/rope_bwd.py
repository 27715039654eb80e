"""Oracle for specs/rope_bwd.yaml: the inverse rotation of rotate-half RoPE, in float64."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, s, h, d = (case.sizes[k] for k in ("B", "S", "H", "D"))
    dy = torch.randn(b, s, h, d, generator=g)
    # real tables: theta_i = base^(-2i/D), with a base drawn per seed (10000 +- 5 %)
    base = 10000.0 * (0.95 + 0.1 * torch.rand(1, generator=g, dtype=torch.float64).item())
    inv = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    ang = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
    return {"dy": dy.to(case.dtype).to(case.device),
            "cos": ang.cos().to(case.dtype).to(case.device),
            "sin": ang.sin().to(case.dtype).to(case.device)}


def reference(inputs, case):
    dy = inputs["dy"].to(torch.float64)
    cos = inputs["cos"].to(torch.float64)[None, :, None, :]
    sin = inputs["sin"].to(torch.float64)[None, :, None, :]
    d1, d2 = dy.chunk(2, dim=-1)
    return {"dx": torch.cat([d1 * cos + d2 * sin, d2 * cos - d1 * sin], dim=-1)}


def baseline(inputs, case):
    """What a user runs without regen: autograd through the rotate-half formulation."""
    dy = inputs["dy"]
    x = torch.zeros_like(dy).requires_grad_(True)
    cos, sin = inputs["cos"][None, :, None, :], inputs["sin"][None, :, None, :]
    with torch.enable_grad():
        x1, x2 = x.chunk(2, dim=-1)
        y = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        (dx,) = torch.autograd.grad(y, (x,), dy)
    return {"dx": dx}


def peers():
    """QuACK's rotary backward (apply_rotary with conjugate=True, what its autograd calls) and
    Liger-Kernel's rope_backward (q and k together, full-width tables [1, S, D], a one-head dk;
    prepared untimed)."""
    def quack(inputs, case):
        from quack.rotary import apply_rotary

        return {"dx": apply_rotary(inputs["dy"], inputs["cos"], inputs["sin"], conjugate=True)}

    def liger_prepare(inputs, case):
        dy, cos, sin = inputs["dy"], inputs["cos"], inputs["sin"]
        return {"dq": dy.clone().transpose(1, 2), "dk": dy[:, :, :1].clone().transpose(1, 2),
                "cos": torch.cat([cos, cos], dim=-1)[None], "sin": torch.cat([sin, sin], dim=-1)[None]}

    def liger(inputs, case):
        from liger_kernel.ops.rope import rope_backward

        dq, _dk = rope_backward(inputs["dq"], inputs["dk"], inputs["cos"], inputs["sin"])
        return {"dx": dq.transpose(1, 2)}

    return {"quack": quack, "liger": (liger_prepare, liger)}


def check(inputs, outputs, case):
    dy = inputs["dy"].to("cpu", torch.float64)
    dx = outputs["dx"].to("cpu", torch.float64)
    if not torch.isfinite(dx).all():
        return ["norm_preserved: dx holds inf or NaN"]
    d1, d2 = dy.chunk(2, dim=-1)
    x1, x2 = dx.chunk(2, dim=-1)
    want = (d1 * d1 + d2 * d2).sqrt()
    got = (x1 * x1 + x2 * x2).sqrt()
    # cos^2 + sin^2 of the rounded tables is 1 within a few of the storage dtype's ulps
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}.get(case.dtype, 1e-5)
    err = ((got - want).abs() / want.clamp_min(1e-3)).max().item() if want.numel() else 0.0
    if err > tol:
        return [f"norm_preserved: a pair's norm changed by {err:.3g} (relative), more than {tol:g}"]
    return []
