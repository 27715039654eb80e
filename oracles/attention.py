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


# float64 scores held at once: the reference and the checks walk the query rows in blocks, so
# the largest case (B 2, 32 heads, S 8192: a 32 GiB score matrix) fits an 80 GB GPU
BLOCK_BYTES = 1 << 31


def _row_blocks(case):
    b, hq, n = case.sizes["B"], case.sizes["Hkv"] * case.sizes["G"], case.sizes["S"]
    rows = max(1, BLOCK_BYTES // (8 * b * hq * n))
    return [(i, min(n, i + rows)) for i in range(0, n, rows)]


def _scores(inputs, case, i0, i1, k=None, dtype=torch.float64):
    """Scores of query rows [i0, i1) against every key (masked above the diagonal if causal)."""
    grp = case.sizes["G"]
    q = inputs["q"][:, :, i0:i1].to(dtype)
    if k is None:
        k = inputs["k"].to(dtype).repeat_interleave(grp, dim=1)
    s = torch.einsum("bhid,bhjd->bhij", q, k) * float(case.params["scale"])
    if case.params["causal"]:
        rows = torch.arange(i0, i1, device=s.device).unsqueeze(-1)
        keep = rows >= torch.arange(s.shape[-1], device=s.device).unsqueeze(0)
        s = s.masked_fill(~keep, float("-inf"))
    return s


def reference(inputs, case):
    grp = case.sizes["G"]
    k = inputs["k"].to(torch.float64).repeat_interleave(grp, dim=1)
    v = inputs["v"].to(torch.float64).repeat_interleave(grp, dim=1)
    outs, lses = [], []
    for i0, i1 in _row_blocks(case):
        s = _scores(inputs, case, i0, i1, k)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse.unsqueeze(-1))
        outs.append(torch.einsum("bhij,bhjd->bhid", p, v))
        lses.append(lse)
        del s, p
    return {"out": torch.cat(outs, dim=2), "lse": torch.cat(lses, dim=2)}


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
    k = inputs["k"].to(torch.float64).repeat_interleave(grp, dim=1)
    m = torch.cat([_scores(inputs, case, i0, i1, k).amax(dim=-1) for i0, i1 in _row_blocks(case)],
                  dim=2)
    count = torch.arange(1, n + 1, device=m.device, dtype=torch.float64) if case.params["causal"] \
        else torch.full((n,), float(n), device=m.device, dtype=torch.float64)
    lse = outputs["lse"].to(torch.float64)
    slack = 1e-4 * (m.abs() + 1.0)
    bad = (lse < m - slack) | (lse > m + torch.log(count) + slack) | ~torch.isfinite(lse)
    if bool(bad.any()):
        problems.append(f"lse_bounds: {int(bad.sum())} rows outside [max s, max s + log(keys)]")
    return problems


def _math(q, k, v, case):
    """SDPA's math backend in float32 with the row log-sum-exp (the fallback when torch's fused
    backend cannot return lse on this device)."""
    s = _scores({"q": q, "k": k}, case, 0, q.shape[2], dtype=torch.float32)
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
