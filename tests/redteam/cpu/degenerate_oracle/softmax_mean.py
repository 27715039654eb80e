"""Red-team oracle for tests/redteam/cpu/degenerate_oracle/softmax_mean.yaml: degenerate on purpose."""

import torch


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    return {"x": (torch.randn(m, n, generator=g) * 3.0).to(case.dtype).to(case.device)}


def reference(inputs, case):
    return {"y": torch.softmax(inputs["x"].to(torch.float64), dim=-1).mean(dim=-1)}
