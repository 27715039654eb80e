"""Oracle for specs/tx_fp8_wgmma.yaml: c = (scale_a a)(scale_b b)^T, dequantized in float64.

Inputs are quantized as gemm_fp8's oracle does: normal draws, one float32 scale per row so the
row's largest magnitude maps to e4m3's largest finite value 448, codes by torch's
round-to-nearest-even cast; the dequantized operands are then about N(0, 1)."""

import torch

DISTRIBUTIONS = ("normal",)
E4M3_MAX = 448.0


def _quantize(x):
    scale = (x.abs().amax(dim=1).clamp_min(1e-12) / E4M3_MAX).to(torch.float32)
    q = (x / scale.reshape(-1, 1)).clamp(-E4M3_MAX, E4M3_MAX)
    return q.to(torch.float8_e4m3fn), scale


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n, k = case.sizes["M"], case.sizes["N"], case.sizes["K"]
    a, sa = _quantize(torch.randn(m, k, generator=g))
    b, sb = _quantize(torch.randn(n, k, generator=g))
    return {name: t.to(case.device) for name, t in
            (("a", a), ("b", b), ("scale_a", sa), ("scale_b", sb))}


def _dequantized(inputs, dtype):
    a = inputs["a"].to(dtype) * inputs["scale_a"].to(dtype).reshape(-1, 1)
    b = inputs["b"].to(dtype) * inputs["scale_b"].to(dtype).reshape(-1, 1)
    return a, b


def reference(inputs, case):
    a, b = _dequantized(inputs, torch.float64)   # e4m3 and float32 -> float64: exact
    return {"c": a @ b.T}


def baseline(inputs, case):
    a, b = _dequantized(inputs, torch.float32)
    return {"c": a @ b.T}
