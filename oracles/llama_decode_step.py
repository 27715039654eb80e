"""Oracle for specs/llama_decode_step.yaml. Its reference is composed from the components' oracles
(embedding, NL x the decoder layer's own composition, rmsnorm, gemv) in float64; this file draws a
model at Llama-3.2-1B's scales from the seed, gives the plain-PyTorch step a user would run as the
baseline, and checks the decode invariants against the reference (teacher-forced: each step is
judged on the inputs it is given, never on the kernel's own earlier tokens)."""

import math

import torch

DISTRIBUTIONS = ("normal",)
LOG10_THETA = (5.0, 6.0)   # RoPE bases around Llama-3's 5e5 (cos and sin are inputs)
EMBED_STD = 0.03           # Llama-3.2-1B's tied table is of this order


def make_inputs(case, seed):
    """Drawn on the case's device, in bfloat16 directly: a real model's 2.5 GB of weights is
    drawn in a fraction of a second on a GPU, with no float32 copy on the host."""
    dev = case.device
    g = torch.Generator(device=dev).manual_seed(seed)
    s = case.sizes
    b, nl, h, hkv, grp, d, length, f, v = (s[k] for k in ("B", "NL", "H", "Hkv", "G", "D", "L",
                                                          "F", "V"))
    hq = hkv * grp
    t = case.dtype

    def normal(*shape, dtype=t):
        return torch.randn(*shape, generator=g, device=dev, dtype=dtype)

    def weight(n, k):  # NL linear layers' weights, std 1/sqrt(in features)
        return normal(nl, n, k, dtype=torch.bfloat16).mul_(1.0 / math.sqrt(k))

    def norm(*shape):  # RMSNorm weights near 1
        return normal(*shape).mul_(0.1).add_(1.0)

    lo, hi = LOG10_THETA
    u = torch.rand((), generator=g, device=dev, dtype=torch.float64).item()
    theta = 10.0 ** (lo + (hi - lo) * u)
    inv = theta ** (-torch.arange(d // 2, dtype=torch.float64) * 2.0 / d)
    angle = (length - 1) * inv[None, :]
    out = {
        "token": torch.randint(0, v, (b,), generator=g, device=dev, dtype=torch.int64),
        "embed_weight": normal(v, h, dtype=torch.bfloat16).mul_(EMBED_STD),
        "attn_norm_weight": norm(nl, h),
        "wq": weight(hq * d, h), "wk": weight(hkv * d, h), "wv": weight(hkv * d, h),
        "cos": torch.cos(angle).to(t), "sin": torch.sin(angle).to(t),
        "k_cache": normal(nl, b, hkv, length, d),
        "v_cache": normal(nl, b, hkv, length, d),
        "wo": weight(h, hq * d),
        "mlp_norm_weight": norm(nl, h),
        "wgu": weight(2 * f, h), "wd": weight(h, f),
        "final_norm_weight": norm(h),
    }
    return {k: x.to(dev) for k, x in out.items()}


def check(inputs, outputs, case, reference):
    """The decode invariants, judged against the reference the outputs were compared with."""
    problems = []
    logits = outputs["logits"].to(torch.float64)
    if not bool(torch.isfinite(logits).all()):
        problems.append("finite: a logit is inf or NaN")
    want = reference["logits"].to(logits.device, torch.float64)
    top = want.topk(min(2, want.shape[-1]), dim=-1)
    if top.values.shape[-1] == 2:
        tol = case.tolerance
        margin = top.values[:, 0] - top.values[:, 1]
        clear = margin > tol.atol + tol.rtol * top.values[:, 0].abs()
        wrong = clear & (logits.argmax(-1) != top.indices[:, 0])
        if bool(wrong.any()):
            b = int(wrong.nonzero()[0])
            problems.append(f"argmax_agrees: sequence {b} decodes token {int(logits[b].argmax())}, "
                            f"the reference's is {int(top.indices[b, 0])} by a margin of "
                            f"{float(margin[b]):.4g} (tolerance {tol.atol:g} + {tol.rtol:g} x "
                            f"|{float(top.values[b, 0]):.4g}|)")
    last = case.sizes["L"] - 1
    for name, src in (("k_cache_out", "k_cache"), ("v_cache_out", "v_cache")):
        got, was = outputs[name], inputs[src]
        keep = torch.ones(got.shape[3], dtype=torch.bool, device=got.device)
        keep[last] = False
        if not torch.equal(got[:, :, :, keep].view(torch.int16), was[:, :, :, keep].view(torch.int16)):
            problems.append(f"cache_slot: {name} changed outside position L-1")
    return problems


def _rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def baseline(inputs, case):
    """The step in plain PyTorch, bf16 storage, as an eager decode loop over the layers runs it
    (the KV caches written in place, as a serving engine does)."""
    s = case.sizes
    b, nl, hkv, grp, d, length, f = (s[k] for k in ("B", "NL", "Hkv", "G", "D", "L", "F"))
    eps, scale = float(case.params["eps"]), float(case.params["scale"])
    lin = torch.nn.functional.linear
    x = torch.nn.functional.embedding(inputs["token"], inputs["embed_weight"])
    kc, vc = inputs["k_cache"], inputs["v_cache"]
    for i in range(nl):
        h = _rms(x, inputs["attn_norm_weight"][i], eps)
        q = lin(h, inputs["wq"][i]).view(b, hkv * grp, d)
        k = lin(h, inputs["wk"][i]).view(b, hkv, d)
        v = lin(h, inputs["wv"][i]).view(b, hkv, d)
        q, k = _rope(q, inputs["cos"], inputs["sin"]), _rope(k, inputs["cos"], inputs["sin"])
        kc[i, :, :, length - 1], vc[i, :, :, length - 1] = k, v
        att = torch.nn.functional.scaled_dot_product_attention(
            q.unsqueeze(2), kc[i], vc[i], scale=scale, enable_gqa=True)
        x = x + lin(att.reshape(b, -1), inputs["wo"][i])
        gu = lin(_rms(x, inputs["mlp_norm_weight"][i], eps), inputs["wgu"][i])
        x = x + lin(torch.nn.functional.silu(gu[:, :f]) * gu[:, f:], inputs["wd"][i])
    logits = lin(_rms(x, inputs["final_norm_weight"], eps), inputs["embed_weight"])
    return {"logits": logits, "k_cache_out": kc, "v_cache_out": vc}
