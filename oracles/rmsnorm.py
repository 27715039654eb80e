"""Oracle for specs/rmsnorm.yaml: y = x / sqrt(mean(x^2) + eps) * weight, in float64."""

import torch

DISTRIBUTIONS = ("normal", "large", "small", "zero_rows")

# relative tolerance of the invariant checks, per dtype (kept in step with the spec's tolerances)
RTOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    x = torch.randn(m, n, generator=g)
    if case.dist == "large":  # mean(x^2) ~ 1e8: overflows if squared in fp16
        x = (x * 1.0e4).clamp(-6.0e4, 6.0e4)
    elif case.dist == "small":  # mean(x^2) ~ eps: eps must be added inside the square root
        x = x * 1.0e-3
    elif case.dist == "zero_rows":  # rows of zeros: eps keeps them finite, the output is 0
        x[1::3] = 0.0
    weight = 1.0 + 0.5 * torch.randn(n, generator=g)
    return {"x": x.to(case.dtype).to(case.device), "weight": weight.to(case.dtype).to(case.device)}


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    w = inputs["weight"].to(torch.float64)
    eps = float(case.params["eps"])
    return {"y": x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w}


def check(inputs, outputs, case):
    x = inputs["x"].to("cpu", torch.float64)
    w = inputs["weight"].to("cpu", torch.float64)
    y = outputs["y"].to("cpu", torch.float64)
    eps = float(case.params["eps"])
    problems = []
    if not torch.isfinite(y).all():
        problems.append(f"finite: {int((~torch.isfinite(y)).sum())} elements of y are inf or NaN")
        return problems
    # y = s * (x * w) with one positive factor per row; fit s by least squares and compare it with
    # 1 / sqrt(mean(x^2) + eps)
    xw = x * w
    den = (xw * xw).sum(-1)
    live = den > 0
    s_fit = (y * xw).sum(-1)[live] / den[live]
    s_ref = torch.rsqrt(x.pow(2).mean(-1) + eps)[live]
    rel = ((s_fit - s_ref).abs() / s_ref).max().item() if live.any() else 0.0
    tol = RTOL.get(case.dtype, 2e-5)
    if rel > tol:
        problems.append(f"row_scale: a row's scale factor is off by {rel:.3g} (relative), "
                        f"more than {tol:g}")
    dead = ~live
    if dead.any() and y[dead].abs().max().item() != 0.0:
        problems.append("row_scale: a row whose x * weight is all zero has a nonzero output")
    return problems


def baseline(inputs, case):
    """What a user runs without regen: torch's fused rms_norm in the storage dtype."""
    x = inputs["x"]
    return {"y": torch.nn.functional.rms_norm(x, (x.shape[-1],), inputs["weight"], float(case.params["eps"]))}


def peers():
    """Liger-Kernel's and QuACK's RMSNorm forward (imported when called). Liger in its "gemma"
    casting mode with offset 0: everything in float32, rounded once, as this spec asks."""
    def liger(inputs, case):
        from liger_kernel.transformers.functional import liger_rms_norm

        y = liger_rms_norm(inputs["x"], inputs["weight"], float(case.params["eps"]), offset=0.0,
                           casting_mode="gemma")
        return {"y": y}

    def quack_prepare(inputs, case):
        return {"x": inputs["x"], "weight": inputs["weight"].float()}  # QuACK keeps fp32 weights

    def quack(inputs, case):
        from quack import rmsnorm

        return {"y": rmsnorm(inputs["x"], inputs["weight"], eps=float(case.params["eps"]))}

    return {"liger": liger, "quack": (quack_prepare, quack)}
