"""Oracle for specs/tx_bulk_copy.yaml: y = 2 x + 1 in float64."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(case.sizes["N"], generator=g)
    return {"x": x.to(case.dtype).to(case.device)}


def reference(inputs, case):
    return {"y": 2.0 * inputs["x"].to(torch.float64) + 1.0}


def baseline(inputs, case):
    return {"y": 2.0 * inputs["x"] + 1.0}
