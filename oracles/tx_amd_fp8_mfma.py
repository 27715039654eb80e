"""Oracle for specs/tx_amd_fp8_mfma.yaml: c = a b^T from OCP e4m3 (float8_e4m3fn) codes, decoded
by torch's float8_e4m3fn (the inputs' format, exponent bias 7) and multiplied in float64.

The draws are normal values rounded to e4m3, with codes the gfx942 (FNUZ) matrix cores read
differently planted among them: negative zeros (0x80, NaN to FNUZ), the largest finite codes
+-448 (0x7e, 0xfe, in a only) and the smallest subnormal 2^-9 (0x01)."""

import torch

DISTRIBUTIONS = ("normal",)


def _codes(rows, cols, g, largest):
    x = torch.randn(rows, cols, generator=g)
    pick = torch.rand(rows, cols, generator=g)
    x[pick < 0.1] = -0.0
    x[(pick >= 0.1) & (pick < 0.12)] = 2.0 ** -9
    if largest:
        x[(pick >= 0.12) & (pick < 0.13)] = 448.0
        x[(pick >= 0.13) & (pick < 0.14)] = -448.0
    return x.to(torch.float8_e4m3fn)


def make_inputs(case, seed):
    """-0 and 2^-9 in both operands; +-448 in a only (448 x 448 products would make the float32
    sums' rounding, not the kernel, the thing the tolerance measures)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n, k = (case.sizes[s] for s in ("M", "N", "K"))
    return {"a": _codes(m, k, g, True).to(case.device), "b": _codes(n, k, g, False).to(case.device)}


def reference(inputs, case):
    return {"c": inputs["a"].to(torch.float64) @ inputs["b"].to(torch.float64).T}


def baseline(inputs, case):
    return {"c": inputs["a"].float() @ inputs["b"].float().T}
