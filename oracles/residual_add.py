"""Oracle for specs/residual_add.yaml: y = x + r in float64."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    x = torch.randn(m, n, generator=g)
    r = torch.randn(m, n, generator=g) * 0.5
    return {"x": x.to(case.dtype).to(case.device), "r": r.to(case.dtype).to(case.device)}


def reference(inputs, case):
    return {"y": inputs["x"].to(torch.float64) + inputs["r"].to(torch.float64)}


def baseline(inputs, case):
    return {"y": inputs["x"] + inputs["r"]}
