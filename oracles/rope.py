"""Oracle for specs/rope.yaml: rotate-half rotary embedding in float64. The tables are drawn from
the seed like every input (a base between 10^2.5 and 10^6.5, covering Llama's 10^4 and 5*10^5), so
a kernel that recomputes cos/sin from a fixed base instead of reading them fails."""

import torch

DISTRIBUTIONS = ("normal",)

LOG10_BASE = (2.5, 6.5)
# relative slack on a pair's squared length: each output's rounding (half an ulp, 2^-8 for
# bfloat16, 2^-11 for float16) can grow its square by twice that; allow twice the sum
PAIR_NORM_TOL = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, s, h, d = (case.sizes[k] for k in ("B", "S", "H", "D"))
    half = d // 2
    x = torch.randn(b, s, h, d, generator=g)
    lo, hi = LOG10_BASE
    base = 10.0 ** (lo + (hi - lo) * torch.rand((), generator=g, dtype=torch.float64).item())
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / d)
    angle = torch.arange(s, dtype=torch.float64).unsqueeze(1) * theta.unsqueeze(0)
    return {"x": x.to(case.dtype).to(case.device),
            "cos": torch.cos(angle).to(case.dtype).to(case.device),
            "sin": torch.sin(angle).to(case.dtype).to(case.device)}


def _halves(t):
    half = t.shape[-1] // 2
    return t[..., :half], t[..., half:]


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    cos = inputs["cos"].to(torch.float64)[None, :, None, :]
    sin = inputs["sin"].to(torch.float64)[None, :, None, :]
    x1, x2 = _halves(x)
    return {"y": torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)}


def check(inputs, outputs, case):
    problems = []
    x = inputs["x"].to(torch.float64)
    y = outputs["y"].to(torch.float64)
    if y.numel() == 0:
        return problems
    cos = inputs["cos"].to(torch.float64)[None, :, None, :]
    sin = inputs["sin"].to(torch.float64)[None, :, None, :]
    x1, x2 = _halves(x)
    y1, y2 = _halves(y)
    want = (x1 * x1 + x2 * x2) * (cos * cos + sin * sin)
    got = y1 * y1 + y2 * y2
    tol = PAIR_NORM_TOL.get(case.dtype, 1e-6)
    excess = ((got - want).abs() - tol * want - tol * 1e-6).max().item()
    if not excess <= 0:  # also catches NaN
        worst = ((got - want).abs() / want.clamp(min=1e-30)).max().item()
        problems.append(f"preserves_pair_norm: a pair's squared length is off by {worst:.3g} "
                        f"(relative; allowed {tol:.3g})")
    at_zero = y[:, 0] != x[:, 0]
    if at_zero.any():
        problems.append(f"identity_at_position_zero: {int(at_zero.sum())} elements at position 0 "
                        f"differ from x")
    return problems


def baseline(inputs, case):
    """What a user runs without regen: the rotate-half formulation in the storage dtype."""
    x = inputs["x"]
    cos, sin = inputs["cos"][None, :, None, :], inputs["sin"][None, :, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return {"y": torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)}


def peers():
    """QuACK's apply_rotary (same layout: x [B, S, H, D], tables [S, D/2]) and Liger-Kernel's
    rope (imported when called). Liger rotates q and k together, in place, with full-width
    tables [1, S, D]: prepare builds those and a one-head k (1/H of extra work), untimed."""
    def quack(inputs, case):
        from quack.rotary import apply_rotary

        return {"y": apply_rotary(inputs["x"], inputs["cos"], inputs["sin"])}

    def liger_prepare(inputs, case):
        x, cos, sin = inputs["x"], inputs["cos"], inputs["sin"]
        return {"q": x.transpose(1, 2), "k": x[:, :, :1].clone().transpose(1, 2),
                "cos": torch.cat([cos, cos], dim=-1)[None], "sin": torch.cat([sin, sin], dim=-1)[None]}

    def liger(inputs, case):
        from liger_kernel.transformers.functional import liger_rope

        q, _k = liger_rope(inputs["q"], inputs["k"], inputs["cos"], inputs["sin"])
        return {"y": q.transpose(1, 2)}

    return {"quack": quack, "liger": (liger_prepare, liger)}
