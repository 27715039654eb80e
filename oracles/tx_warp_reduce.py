"""Oracle for specs/tx_warp_reduce.yaml: row sums of x in float64."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(case.sizes["M"], case.sizes["N"], generator=g)
    return {"x": x.to(case.dtype).to(case.device)}


def reference(inputs, case):
    return {"y": inputs["x"].to(torch.float64).sum(dim=1)}


def baseline(inputs, case):
    return {"y": inputs["x"].sum(dim=1)}
