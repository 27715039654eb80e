"""Oracle for specs/decode_attention.yaml: grouped-query decode attention in float64."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, hkv, grp, length, d = (case.sizes[s] for s in ("B", "Hkv", "G", "L", "D"))
    q = torch.randn(b, hkv * grp, d, generator=g)
    k = torch.randn(b, hkv, length, d, generator=g)
    v = torch.randn(b, hkv, length, d, generator=g)
    return {name: t.to(case.dtype).to(case.device) for name, t in
            (("q", q), ("k", k), ("v", v))}


def _expand(t, grp):
    return t.repeat_interleave(grp, dim=1)


def reference(inputs, case):
    grp = case.sizes["G"]
    q = inputs["q"].to(torch.float64)
    k = _expand(inputs["k"].to(torch.float64), grp)
    v = _expand(inputs["v"].to(torch.float64), grp)
    s = torch.einsum("bhd,bhld->bhl", q, k) * float(case.params["scale"])
    p = torch.softmax(s, dim=-1)
    return {"out": torch.einsum("bhl,bhld->bhd", p, v)}


def check(inputs, outputs, case):
    grp = case.sizes["G"]
    v = _expand(inputs["v"].to(torch.float64), grp)
    out = outputs["out"].to(torch.float64)
    lo, hi = v.amin(dim=2), v.amax(dim=2)
    slack = 1.6e-2 * torch.maximum(lo.abs(), hi.abs()) + 1e-5
    bad = (out < lo - slack) | (out > hi + slack) | ~torch.isfinite(out)
    return [f"convex_combination: {int(bad.sum())} outputs lie outside [min v, max v]"] \
        if bool(bad.any()) else []


def baseline(inputs, case):
    """What a user runs without regen: torch's scaled_dot_product_attention, KV heads expanded."""
    grp = case.sizes["G"]
    q = inputs["q"].unsqueeze(2)
    k, v = _expand(inputs["k"], grp), _expand(inputs["v"], grp)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=float(case.params["scale"]))
    return {"out": out.squeeze(2)}
