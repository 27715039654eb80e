"""Oracle for specs/tx_block_scaled_mma.yaml: c = A B^T with A and B in MXFP8 (e4m3), both
dequantized in float64 by regen.formats (the OCP MX rules).

Inputs are quantized as mx_gemm's oracle does: normal draws whose 32-element blocks are scaled by
2^u, u uniform in [-2, 2] (so block scales differ within a row), then OCP MX quantization."""

import numpy as np
import torch

from regen import formats

DISTRIBUTIONS = ("normal",)
FORMAT = "mxfp8_e4m3"


def _draw(rows, k, g):
    x = torch.randn(rows, k, generator=g, dtype=torch.float64)
    u = torch.rand(rows, k // formats.BLOCK, generator=g, dtype=torch.float64) * 4 - 2
    return (x.reshape(rows, -1, formats.BLOCK) * torch.exp2(u)[..., None]).reshape(rows, k).numpy()


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n, k = (case.sizes[s] for s in ("M", "N", "K"))
    a, a_scale = formats.to_mx(_draw(m, k, g), FORMAT)
    b, b_scale = formats.to_mx(_draw(n, k, g), FORMAT)
    return {name: torch.from_numpy(np.ascontiguousarray(t)).to(case.device) for name, t in
            (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale))}


def _dequantized(inputs):
    host = {k: v.cpu().numpy() for k, v in inputs.items()}
    return (torch.from_numpy(formats.from_mx(host["a"], host["a_scale"], FORMAT)),
            torch.from_numpy(formats.from_mx(host["b"], host["b_scale"], FORMAT)))


def reference(inputs, case):
    a, b = _dequantized(inputs)
    return {"c": (a @ b.T).to(inputs["a"].device)}


def baseline(inputs, case):
    a, b = _dequantized(inputs)
    return {"c": (a.float() @ b.float().T).to(inputs["a"].device)}
