"""Oracle for specs/swiglu.yaml: y = silu(a) * b where [a | b] = x split in halves along the last
dimension, in float64."""

import torch

DISTRIBUTIONS = ("normal", "large")

RTOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    x = torch.randn(m, 2 * n, generator=g) * 3.0
    if case.dist == "large":  # gates deep in both tails: exp(-a) overflows float32 for a < -88
        x[:, :n] = torch.randn(m, n, generator=g) * 60.0
    return {"x": x.to(case.dtype).to(case.device)}


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    n = x.shape[-1] // 2
    a, b = x[..., :n], x[..., n:]
    return {"y": a * torch.sigmoid(a) * b}


def check(inputs, outputs, case):
    x = inputs["x"].to("cpu", torch.float64)
    y = outputs["y"].to("cpu", torch.float64)
    n = x.shape[-1] // 2
    a, b = x[..., :n], x[..., n:]
    problems = []
    if not torch.isfinite(y).all():
        problems.append(f"finite: {int((~torch.isfinite(y)).sum())} elements of y are inf or NaN")
        return problems
    if (y * a * b < 0).any():
        problems.append(f"gate_sign: {int((y * a * b < 0).sum())} elements of y do not have "
                        "the sign of a * b")
    tol = RTOL.get(case.dtype, 2e-5)
    # silu(a) = y / b lies in [min silu, max(a, 0)] (min silu = -0.278465 at a = -1.2785); checked
    # where |b| >= 0.5 so the quotient keeps the output's relative precision
    use = b.abs() >= 0.5
    g, ag = (y / b.where(use, torch.ones_like(b)))[use], a[use]
    outside = (g > ag.clamp_min(0) * (1 + tol) + 1e-6) | (g < -0.278465 * (1 + tol) - 1e-6)
    if outside.any():
        problems.append(f"gate_bounds: {int(outside.sum())} elements of y / b lie outside "
                        "[min silu, max(a, 0)]")
    big = a >= 20.0
    if big.any():
        err = ((y[big] - (a * b)[big]).abs() / (a * b)[big].abs().clamp_min(1e-30)).max().item()
        if err > tol:
            problems.append(f"linear_for_large_gate: where a >= 20, y differs from a * b by "
                            f"{err:.3g} (relative)")
    return problems


def baseline(inputs, case):
    """What a user runs without regen: silu(a) * b on the two halves, in the storage dtype."""
    a, b = inputs["x"].chunk(2, dim=-1)
    return {"y": torch.nn.functional.silu(a) * b}


def peers():
    """Liger-Kernel's SwiGLU (LigerSiLUMulFunction, imported when called). Liger takes the gate
    and the value as two row-major tensors (its kernel steps both by the output's row stride),
    which is how its users hold them (two projections): prepare splits x untimed."""
    def liger_prepare(inputs, case):
        a, b = inputs["x"].chunk(2, dim=-1)
        return {"a": a.contiguous(), "b": b.contiguous()}

    def liger(inputs, case):
        from liger_kernel.transformers.functional import liger_swiglu

        return {"y": liger_swiglu(inputs["a"], inputs["b"])}

    return {"liger": (liger_prepare, liger)}
