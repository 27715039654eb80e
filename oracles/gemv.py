"""Oracle for specs/gemv.yaml: y = x @ w^T in float64. Weights at a linear layer's scale."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, n, k = (case.sizes[s] for s in ("B", "N", "K"))
    x = torch.randn(b, k, generator=g)
    w = torch.randn(n, k, generator=g) * (1.0 / max(k, 1) ** 0.5)
    return {"x": x.to(case.dtype).to(case.device), "w": w.to(torch.bfloat16).to(case.device)}


def reference(inputs, case):
    return {"y": inputs["x"].to(torch.float64) @ inputs["w"].to(torch.float64).T}


def check(inputs, outputs, case):
    y = outputs["y"]
    return [] if bool(torch.isfinite(y).all()) else ["finite: y has inf or NaN elements"]


def baseline(inputs, case):
    """What a user runs without regen: torch's linear in the storage dtype."""
    return {"y": torch.nn.functional.linear(inputs["x"], inputs["w"].to(inputs["x"].dtype))}
