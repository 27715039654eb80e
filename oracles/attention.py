"""Oracle for specs/attention.yaml: grouped-query (causal) attention and its row log-sum-exp in
float64.

Tolerance calibration (benchmarks/attention_tolerance.py): the honest fast kernel is
flash-style: float32 scores and statistics, an online softmax over key tiles, probabilities
rounded to bf16 before P V, out rounded to bf16 once. Its error against this float64 reference,
over the spec's correctness cases and seeds 0-7, reaches at most 0.63 of the bound
|err| <= atol + rtol * |ref| with atol 4e-3, rtol 1.6e-2 (large_scores; 0.19-0.57 elsewhere):
the final bf16 rounding alone is up to 2^-9 = 2.0e-3 relative, the bf16 probabilities add about
2^-9 * |v| / sqrt(keys) absolute. `regen tolerance attention` checks the naive float32 reference
and torch's SDPA against the same bound.
"""

import torch

DISTRIBUTIONS = ("normal", "large")


def make_inputs(case, seed):
    """Normal q, k, v; `large`: q and k scaled by 4, so scores reach tens and rows are peaked."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, hkv, grp, s, d = (case.sizes[n] for n in ("B", "Hkv", "G", "S", "D"))
    q = torch.randn(b, hkv * grp, s, d, generator=g)
    k = torch.randn(b, hkv, s, d, generator=g)
    v = torch.randn(b, hkv, s, d, generator=g)
    if case.dist == "large":
        q, k = q * 4.0, k * 4.0
    return {name: t.to(case.dtype).to(case.device) for name, t in (("q", q), ("k", k), ("v", v))}


def _scores(inputs, case, dtype=torch.float64):
    grp = case.sizes["G"]
    q = inputs["q"].to(dtype)
    k = inputs["k"].to(dtype).repeat_interleave(grp, dim=1)
    s = torch.einsum("bhid,bhjd->bhij", q, k) * float(case.params["scale"])
    if case.params["causal"]:
        n = s.shape[-1]
        keep = torch.ones(n, n, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s


def reference(inputs, case):
    grp = case.sizes["G"]
    s = _scores(inputs, case)
    v = inputs["v"].to(s.dtype).repeat_interleave(grp, dim=1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    return {"out": torch.einsum("bhij,bhjd->bhid", p, v), "lse": lse}


def check(inputs, outputs, case):
    grp = case.sizes["G"]
    n = case.sizes["S"]
    v = inputs["v"].to(torch.float64).repeat_interleave(grp, dim=1)
    out = outputs["out"].to(torch.float64)
    problems = []
    if case.params["causal"]:  # running min / max of v over keys 0..i
        lo, hi = torch.cummin(v, dim=2).values, torch.cummax(v, dim=2).values
    else:
        lo, hi = v.amin(dim=2, keepdim=True), v.amax(dim=2, keepdim=True)
    slack = 1.6e-2 * torch.maximum(lo.abs(), hi.abs()) + 4e-3
    bad = (out < lo - slack) | (out > hi + slack) | ~torch.isfinite(out)
    if bool(bad.any()):
        problems.append(f"convex_combination: {int(bad.sum())} outputs lie outside [min v, max v]")
    s = _scores(inputs, case)
    m = s.amax(dim=-1)
    count = torch.arange(1, n + 1, device=s.device, dtype=torch.float64) if case.params["causal"] \
        else torch.full((n,), float(n), device=s.device, dtype=torch.float64)
    lse = outputs["lse"].to(torch.float64)
    slack = 1e-4 * (m.abs() + 1.0)
    bad = (lse < m - slack) | (lse > m + torch.log(count) + slack) | ~torch.isfinite(lse)
    if bool(bad.any()):
        problems.append(f"lse_bounds: {int(bad.sum())} rows outside [max s, max s + log(keys)]")
    return problems


def _math(q, k, v, case):
    """SDPA's math backend in float32 with the row log-sum-exp (the fallback when torch's fused
    backend cannot return lse on this device)."""
    s = _scores({"q": q, "k": k}, case, torch.float32)
    lse = torch.logsumexp(s, dim=-1)
    grp = case.sizes["G"]
    out = torch.einsum("bhij,bhjd->bhid", torch.exp(s - lse.unsqueeze(-1)),
                       v.float().repeat_interleave(grp, dim=1))
    return {"out": out.to(q.dtype), "lse": lse}


def _fused(backend, q, k, v, causal, scale):
    """(out, lse) from one fused SDPA backend's aten op (the call autograd's forward makes)."""
    aten, names = torch.ops.aten, torch.nn.attention.SDPBackend
    if backend == int(names.FLASH_ATTENTION):
        out, lse = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False,
                                                            scale=scale)[:2]
    elif backend == int(names.CUDNN_ATTENTION):
        out, lse = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal,
                                                            False, scale=scale)[:2]
    elif backend == int(names.EFFICIENT_ATTENTION):
        out, lse = aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal,
                                                                scale=scale)[:2]
    else:
        raise RuntimeError(f"no fused SDPA backend ({backend})")
    lse = lse.reshape(*out.shape[:2], -1)[..., :out.shape[2]]
    return {"out": out.contiguous(), "lse": lse.float().contiguous()}


def baseline(inputs, case):
    """What a user runs without regen for a training forward (out and lse): the fused SDPA
    backend torch picks for these tensors (torch._fused_sdp_choice), called through the aten op
    that returns lse as autograd's forward does, on the grouped K/V heads, or expanded ones when
    that op refuses them. The math path only when no fused backend answers (CPU tensors: torch's
    CPU flash kernel)."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    scale, causal, grp = float(case.params["scale"]), bool(case.params["causal"]), case.sizes["G"]
    if q.device.type == "cpu":
        ke, ve = k.repeat_interleave(grp, dim=1), v.repeat_interleave(grp, dim=1)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, ke, ve, 0.0, causal, scale=scale)[:2]
        return {"out": out.contiguous(), "lse": lse.float().contiguous()}
    try:
        backend = int(torch._fused_sdp_choice(q, k, v, None, 0.0, causal, scale=scale,
                                              enable_gqa=grp > 1))
    except (TypeError, AttributeError, RuntimeError):  # a torch without the choice or GQA in it
        backend = int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)
    for expand in ((False, True) if grp > 1 else (False,)):
        kk = k.repeat_interleave(grp, dim=1) if expand else k
        vv = v.repeat_interleave(grp, dim=1) if expand else v
        try:
            return _fused(backend, q, kk, vv, causal, scale)
        except RuntimeError:
            continue
    return _math(q, k, v, case)
