"""Oracle for specs/llama_layer_decode.yaml. Its reference is composed from the components'
oracles (the spec's composition); this file draws the inputs at a real model's scales, every one
from the seed, and gives the plain-PyTorch layer a user would run as the baseline."""

import math

import torch

DISTRIBUTIONS = ("normal",)
LOG10_THETA = (4.0, 6.0)  # RoPE bases around Llama's 5e5


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    s = case.sizes
    b, h, hkv, grp, d, length, f = (s[k] for k in ("B", "H", "Hkv", "G", "D", "L", "F"))
    hq = hkv * grp

    def weight(n, k):  # a linear layer's weight, std 1/sqrt(in features)
        return (torch.randn(n, k, generator=g) / math.sqrt(k)).to(torch.bfloat16)

    lo, hi = LOG10_THETA
    theta = 10.0 ** (lo + (hi - lo) * torch.rand((), generator=g, dtype=torch.float64).item())
    inv = theta ** (-torch.arange(d // 2, dtype=torch.float64) * 2.0 / d)
    angle = (length - 1) * inv[None, :]
    t = case.dtype
    out = {
        "x": torch.randn(b, h, generator=g).to(t),
        "attn_norm_weight": (1.0 + 0.1 * torch.randn(h, generator=g)).to(t),
        "wq": weight(hq * d, h), "wk": weight(hkv * d, h), "wv": weight(hkv * d, h),
        "cos": torch.cos(angle).to(t), "sin": torch.sin(angle).to(t),
        "k_cache": torch.randn(b, hkv, length, d, generator=g).to(t),
        "v_cache": torch.randn(b, hkv, length, d, generator=g).to(t),
        "wo": weight(h, hq * d),
        "mlp_norm_weight": (1.0 + 0.1 * torch.randn(h, generator=g)).to(t),
        "wgu": weight(2 * f, h), "wd": weight(h, f),
    }
    return {k: v.to(case.device) for k, v in out.items()}


def _rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def baseline(inputs, case):
    """The layer in plain PyTorch, bf16 storage (what an eager decode step runs)."""
    s = case.sizes
    b, hkv, grp, d, length, f = (s[k] for k in ("B", "Hkv", "G", "D", "L", "F"))
    eps, scale = float(case.params["eps"]), float(case.params["scale"])
    x = inputs["x"]
    h = _rms(x, inputs["attn_norm_weight"], eps)
    q = torch.nn.functional.linear(h, inputs["wq"]).view(b, hkv * grp, d)
    k = torch.nn.functional.linear(h, inputs["wk"]).view(b, hkv, d)
    v = torch.nn.functional.linear(h, inputs["wv"]).view(b, hkv, d)
    q, k = _rope(q, inputs["cos"], inputs["sin"]), _rope(k, inputs["cos"], inputs["sin"])
    kc, vc = inputs["k_cache"].clone(), inputs["v_cache"].clone()
    kc[:, :, length - 1], vc[:, :, length - 1] = k, v
    att = torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(2), kc.repeat_interleave(grp, 1), vc.repeat_interleave(grp, 1), scale=scale)
    x1 = x + torch.nn.functional.linear(att.reshape(b, -1), inputs["wo"])
    gu = torch.nn.functional.linear(_rms(x1, inputs["mlp_norm_weight"], eps), inputs["wgu"])
    y = x1 + torch.nn.functional.linear(torch.nn.functional.silu(gu[:, :f]) * gu[:, f:], inputs["wd"])
    return {"y": y, "k_cache_out": kc, "v_cache_out": vc}
