"""Oracle for specs/layernorm.yaml: y = (x - mean) / sqrt(var + eps) * weight + bias, in float64
(var is the biased, population variance over the last dimension)."""

import torch

DISTRIBUTIONS = ("normal", "large", "offset", "constant")

RTOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    x = torch.randn(m, n, generator=g)
    if case.dist == "large":
        x = (x * 1.0e4).clamp(-6.0e4, 6.0e4)
    elif case.dist == "offset":
        # a mean far from zero relative to the spread: E[x^2] - E[x]^2 cancels catastrophically
        x = 100.0 + x
    elif case.dist == "constant":
        # every row constant (variance 0 -> y = bias); the values are multiples of 1/16 in
        # [-4, 4), exact in every dtype, so an honest float32 sum of them is exact too
        x = (torch.randint(-64, 64, (m, 1), generator=g).to(torch.float32) / 16.0).expand(m, n)
    weight = 1.0 + 0.5 * torch.randn(n, generator=g)
    bias = 0.5 * torch.randn(n, generator=g)
    return {"x": x.to(case.dtype).contiguous().to(case.device),
            "weight": weight.to(case.dtype).to(case.device),
            "bias": bias.to(case.dtype).to(case.device)}


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    w = inputs["weight"].to(torch.float64)
    b = inputs["bias"].to(torch.float64)
    eps = float(case.params["eps"])
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return {"y": (x - mean) * torch.rsqrt(var + eps) * w + b}


def check(inputs, outputs, case):
    x = inputs["x"].to("cpu", torch.float64)
    w = inputs["weight"].to("cpu", torch.float64)
    b = inputs["bias"].to("cpu", torch.float64)
    y = outputs["y"].to("cpu", torch.float64)
    eps = float(case.params["eps"])
    problems = []
    if not torch.isfinite(y).all():
        problems.append(f"finite: {int((~torch.isfinite(y)).sum())} elements of y are inf or NaN")
        return problems
    tol = RTOL.get(case.dtype, 2e-5)
    centred = x - x.mean(-1, keepdim=True)
    var = centred.pow(2).mean(-1)
    # y - bias = s * (x - mean) * w with one positive factor per row, s = 1 / sqrt(var + eps)
    cw = centred * w
    den = (cw * cw).sum(-1)
    live = den > 0
    if live.any():
        s_fit = ((y - b) * cw).sum(-1)[live] / den[live]
        s_ref = torch.rsqrt(var + eps)[live]
        rel = ((s_fit - s_ref).abs() / s_ref).max().item()
        if rel > tol:
            problems.append(f"row_affine: a row's scale factor is off by {rel:.3g} (relative), "
                            f"more than {tol:g}")
    flat = var == 0
    if flat.any():
        err = ((y[flat] - b).abs() - tol * b.abs()).max().item()
        if err > tol:
            problems.append(f"constant_rows: a row with zero variance is {err:.3g} away from bias")
    return problems


def baseline(inputs, case):
    """What a user runs without regen: torch's layer_norm in the storage dtype."""
    x = inputs["x"]
    return {"y": torch.nn.functional.layer_norm(x, (x.shape[-1],), inputs["weight"], inputs["bias"],
                                                float(case.params["eps"]))}


def peers():
    """Liger-Kernel's and QuACK's LayerNorm forward (imported when called)."""
    def liger(inputs, case):
        from liger_kernel.transformers.functional import liger_layer_norm

        return {"y": liger_layer_norm(inputs["x"], inputs["weight"], inputs["bias"],
                                      float(case.params["eps"]))}

    def quack_prepare(inputs, case):  # QuACK's layernorm takes float32 weight and bias
        return {"x": inputs["x"], "weight": inputs["weight"].float(),
                "bias": inputs["bias"].float()}

    def quack(inputs, case):
        from quack.rmsnorm import layernorm_fwd

        return {"y": layernorm_fwd(inputs["x"], inputs["weight"], inputs["bias"],
                                   eps=float(case.params["eps"]))}

    return {"liger": liger, "quack": (quack_prepare, quack)}
