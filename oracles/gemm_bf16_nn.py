"""Oracle for specs/gemm_bf16_nn.yaml: C = alpha * A @ B in float64, B stored [K, N]."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    # drawn where the case runs: the benchmark shapes hold ~10^9 values, seconds per set on the host
    g = torch.Generator(device=case.device).manual_seed(seed)
    m, n, k = (case.sizes[s] for s in ("M", "N", "K"))
    a = torch.randn(m, k, generator=g, device=case.device)
    b = torch.randn(k, n, generator=g, device=case.device) / max(k, 1) ** 0.5  # C at unit scale
    return {"a": a.to(torch.bfloat16), "b": b.to(torch.bfloat16)}


def reference(inputs, case):
    alpha = float(case.params["alpha"])
    return {"c": alpha * (inputs["a"].to(torch.float64) @ inputs["b"].to(torch.float64))}


def check(inputs, outputs, case):
    c = outputs["c"]
    return [] if bool(torch.isfinite(c).all()) else ["finite: c has inf or NaN elements"]


def baseline(inputs, case):
    """What a user runs without regen: torch.matmul on the bf16 tensors (cuBLAS on a GPU)."""
    alpha = float(case.params["alpha"])
    c = torch.matmul(inputs["a"], inputs["b"])
    return {"c": c if alpha == 1.0 else (c * alpha).to(torch.bfloat16)}
