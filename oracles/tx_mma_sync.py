"""Oracle for specs/tx_mma_sync.yaml: c = a b^T in float64 from the bf16 operands (the output is
float32, so the reference is the exact product sum before that rounding)."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n, k = case.sizes["M"], case.sizes["N"], case.sizes["K"]
    a = torch.randn(m, k, generator=g)
    b = torch.randn(n, k, generator=g)
    return {"a": a.to(case.dtype).to(case.device), "b": b.to(case.dtype).to(case.device)}


def reference(inputs, case):
    return {"c": inputs["a"].to(torch.float64) @ inputs["b"].to(torch.float64).T}


def baseline(inputs, case):
    return {"c": inputs["a"].float() @ inputs["b"].float().T}
