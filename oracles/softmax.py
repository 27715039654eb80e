"""Oracle for specs/softmax.yaml: float64 softmax over the last dimension."""

import torch


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    if case.dist == "large":
        x = torch.randn(m, n, generator=g) * 1000.0
    elif case.dist == "constant":
        x = torch.full((m, n), float(torch.randn(1, generator=g).item()))
    else:
        x = torch.randn(m, n, generator=g) * 3.0
    if case.dist == "neg_inf_mask":
        mask = torch.rand(m, n, generator=g) < 0.3
        mask[:, 0] = False  # never a fully masked row
        x = x.masked_fill(mask, float("-inf"))
    return {"x": x.to(case.dtype).to(case.device)}


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    return {"y": torch.softmax(x, dim=-1)}


def check(inputs, outputs, case):
    y = outputs["y"].to(torch.float64)
    problems = []
    n = y.shape[-1]
    tol = {torch.float32: 1.5e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}.get(case.dtype, 1.5e-5)
    err = (y.sum(-1) - 1).abs().max().item() if y.numel() else 0.0
    if err > tol * max(1.0, n ** 0.5):
        problems.append(f"rows_sum_to_one: a row sums to 1 {'+' if err > 0 else ''}{err:.3g} away")
    if y.numel() and (y.min().item() < 0 or y.max().item() > 1):
        problems.append(f"in_unit_interval: values span [{y.min().item():.3g}, {y.max().item():.3g}]")
    return problems
