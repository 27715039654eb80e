"""Oracle for specs/tx_mma_epilogue.yaml: c = relu(alpha * a b^T + bias) in float64 from the
bf16 operands and float32 bias, before the output's rounding to bf16."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n, k = case.sizes["M"], case.sizes["N"], case.sizes["K"]
    a = torch.randn(m, k, generator=g)
    b = torch.randn(n, k, generator=g)
    bias = torch.randn(n, generator=g)
    return {"a": a.to(case.dtype).to(case.device), "b": b.to(case.dtype).to(case.device),
            "bias": bias.to(case.device)}


def reference(inputs, case):
    alpha = float(case.params["alpha"])
    acc = inputs["a"].to(torch.float64) @ inputs["b"].to(torch.float64).T
    return {"c": torch.relu(alpha * acc + inputs["bias"].to(torch.float64))}


def baseline(inputs, case):
    alpha = float(case.params["alpha"])
    acc = inputs["a"].float() @ inputs["b"].float().T
    return {"c": torch.relu(alpha * acc + inputs["bias"]).to(inputs["a"].dtype)}
