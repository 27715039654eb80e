"""Oracle for specs/tx_amd_persistent_grid.yaml: C = A @ B^T in float64 from the bf16 inputs."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n, k = (case.sizes[s] for s in ("M", "N", "K"))
    a = torch.randn(m, k, generator=g)
    b = torch.randn(n, k, generator=g) * (1.0 / max(k, 1) ** 0.5)  # C at unit scale
    return {"a": a.to(torch.bfloat16).to(case.device), "b": b.to(torch.bfloat16).to(case.device)}


def reference(inputs, case):
    return {"c": inputs["a"].to(torch.float64) @ inputs["b"].to(torch.float64).T}


def baseline(inputs, case):
    return {"c": inputs["a"].float() @ inputs["b"].float().T}
