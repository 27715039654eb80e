"""Oracle for specs/mx_gemm.yaml: c = A B^T with A in MXFP8 (e4m3) and B in MXFP4, both
dequantized in float64 by regen.formats (the OCP MX rules, independent of any device's
conversions).

Inputs are quantized as an MX recipe would: normal draws whose 32-element blocks are scaled by
2^u, u uniform in [-2, 2] (so block scales differ within a row), then OCP MX quantization (shared
exponent floor(log2 amax) - emax, round to nearest even, saturating)."""

import numpy as np
import torch

from regen import formats

DISTRIBUTIONS = ("normal",)
A_FORMAT, B_FORMAT = "mxfp8_e4m3", "mxfp4"


def _draw(rows, k, g):
    x = torch.randn(rows, k, generator=g, dtype=torch.float64)
    u = torch.rand(rows, k // formats.BLOCK, generator=g, dtype=torch.float64) * 4 - 2
    return (x.reshape(rows, -1, formats.BLOCK) * torch.exp2(u)[..., None]).reshape(rows, k).numpy()


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n, k = (case.sizes[s] for s in ("M", "N", "K"))
    a, a_scale = formats.to_mx(_draw(m, k, g), A_FORMAT)
    b, b_scale = formats.to_mx(_draw(n, k, g), B_FORMAT)
    return {name: torch.from_numpy(np.ascontiguousarray(t)).to(case.device) for name, t in
            (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale))}


def _dequantized(inputs):
    host = {k: v.cpu().numpy() for k, v in inputs.items()}
    a = formats.from_mx(host["a"], host["a_scale"], A_FORMAT)
    b = formats.from_mx(host["b"], host["b_scale"], B_FORMAT)
    return torch.from_numpy(a), torch.from_numpy(b)


def reference(inputs, case):
    dev = inputs["a"].device  # the float64 product where the inputs are (a GPU for the big cases)
    a, b = (x.to(dev) for x in _dequantized(inputs))
    return {"c": a @ b.T}


def check(inputs, outputs, case):
    c = outputs["c"]
    return [] if bool(torch.isfinite(c).all()) else ["finite: c has inf or NaN elements"]


def _device_dequantized(inputs, dtype):
    """The operands dequantized with torch on their own device (what a user without an MX kernel
    writes): code tables and 2^(scale - 127), exact in bf16 for these formats."""
    dev = inputs["a"].device
    e4m3 = torch.from_numpy(formats.decode(np.arange(256), formats.E4M3)).to(dev, torch.float32)
    e2m1 = torch.from_numpy(formats.decode(np.arange(16), formats.E2M1)).to(dev, torch.float32)

    def scaled(values, scale):
        rows = values.shape[0]
        blocks = values.reshape(rows, -1, formats.BLOCK)
        factor = torch.exp2(scale.to(torch.float32) - formats.E8M0_BIAS)[..., None]
        return (blocks * factor).reshape(rows, -1).to(dtype)

    a = scaled(e4m3[inputs["a"].long()], inputs["a_scale"])
    b_codes = inputs["b"].long()
    b = torch.stack([e2m1[b_codes & 15], e2m1[b_codes >> 4]], dim=-1).reshape(b_codes.shape[0], -1)
    return a, scaled(b, inputs["b_scale"])


def baseline(inputs, case):
    """What a user runs without an MX kernel: dequantize to bf16 on the device (exact for these
    formats) and multiply with torch's bf16 matmul."""
    a, b = _device_dequantized(inputs, torch.bfloat16)
    return {"c": a @ b.T}
