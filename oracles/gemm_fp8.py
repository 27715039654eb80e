"""Oracle for specs/gemm_fp8.yaml: c = (scale_a a)(scale_b b)^T, dequantized in float64.

Inputs are quantized as an FP8 recipe would: normal draws, one scale per row (or per tensor) so
the row's largest magnitude maps to e4m3's largest finite value 448, codes by torch's
round-to-nearest-even cast. The dequantized operands are then about N(0, 1)."""

import torch

DISTRIBUTIONS = ("normal",)
E4M3_MAX = 448.0


def _quantize(x, per_tensor):
    amax = x.abs().amax() if per_tensor else x.abs().amax(dim=1)
    scale = (amax.clamp_min(1e-12) / E4M3_MAX).to(torch.float32).reshape(-1)
    q = (x / scale.reshape(-1, 1).to(x.dtype)).clamp(-E4M3_MAX, E4M3_MAX)
    return q.to(torch.float8_e4m3fn), scale


def make_inputs(case, seed):
    # drawn where the case runs: the benchmark shapes hold ~10^9 values, seconds per set on the host
    g = torch.Generator(device=case.device).manual_seed(seed)
    m, n, k = (case.sizes[s] for s in ("M", "N", "K"))
    per_tensor = bool(case.params.get("per_tensor", False))
    a, sa = _quantize(torch.randn(m, k, generator=g, device=case.device), per_tensor)
    b, sb = _quantize(torch.randn(n, k, generator=g, device=case.device), per_tensor)
    return {"a": a, "b": b, "scale_a": sa, "scale_b": sb}


def _dequantized(inputs, dtype):
    a = inputs["a"].to(dtype) * inputs["scale_a"].to(dtype).reshape(-1, 1)
    b = inputs["b"].to(dtype) * inputs["scale_b"].to(dtype).reshape(-1, 1)
    return a, b


def reference(inputs, case):
    a, b = _dequantized(inputs, torch.float64)  # e4m3 -> float64 is exact
    return {"c": a @ b.T}


def check(inputs, outputs, case):
    c = outputs["c"]
    return [] if bool(torch.isfinite(c).all()) else ["finite: c has inf or NaN elements"]


def baseline(inputs, case):
    """What a user runs without regen: torch._scaled_mm on a GPU where it takes these shapes
    (cuBLASLt: K and N multiples of 16); elsewhere (the cpu has no _scaled_mm) dequantize and
    multiply in float32."""
    a, b, sa, sb = (inputs[k] for k in ("a", "b", "scale_a", "scale_b"))
    m, n = a.shape[0], b.shape[0]
    if a.is_cuda and hasattr(torch, "_scaled_mm") and a.shape[1] % 16 == 0 and n % 16 == 0:
        rowwise = sa.numel() != 1
        try:
            return {"c": torch._scaled_mm(
                a, b.t(), scale_a=sa.reshape(m, 1) if rowwise else sa.reshape(()),
                scale_b=sb.reshape(1, n) if rowwise else sb.reshape(()), out_dtype=torch.bfloat16)}
        except RuntimeError:  # a shape or scaling this torch's cuBLASLt path does not take
            pass
    a32, b32 = _dequantized(inputs, torch.float32)
    return {"c": (a32 @ b32.T).to(torch.bfloat16)}
