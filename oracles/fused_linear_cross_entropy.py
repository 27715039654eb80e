"""Oracle for specs/fused_linear_cross_entropy.yaml: float64 LM-head cross-entropy (ignore_index
-100) and the gradients of its mean with respect to the hidden states and the weight."""

import math

import torch

DISTRIBUTIONS = ("normal", "ignore")

IGNORE_INDEX = -100


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    n, h, v = case.sizes["N"], case.sizes["H"], case.sizes["V"]
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(v, h, generator=g) * (2.0 / math.sqrt(max(h, 1)))   # logits ~ N(0, 4)
    targets = torch.randint(0, v, (n,), generator=g)
    if case.dist == "ignore":
        skip = torch.rand(n, generator=g) < 0.25
        skip[0] = True
        skip[n - 1] = False
        targets = targets.masked_fill(skip, IGNORE_INDEX)
    return {"hidden": hidden.to(case.dtype).to(case.device),
            "weight": weight.to(case.dtype).to(case.device), "targets": targets.to(case.device)}


def reference(inputs, case):
    h = inputs["hidden"].to(torch.float64)
    w = inputs["weight"].to(torch.float64)
    t = inputs["targets"]
    counted = t != IGNORE_INDEX
    count = counted.sum()
    idx = t.clamp(min=0).unsqueeze(1)
    loss = torch.zeros((), dtype=torch.float64, device=h.device)
    dh = torch.empty_like(h)
    dw = torch.empty_like(w)
    rows = max(1, (1 << 26) // max(w.shape[0], 1))   # float64 logits a block of tokens at a time
    for r0 in range(0, h.shape[0], rows):
        hb = h[r0:r0 + rows]
        logits = hb @ w.T
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        keep = counted[r0:r0 + rows].unsqueeze(1)
        loss = loss + ((lse - logits.gather(1, idx[r0:r0 + rows])) * keep).sum()
        grad = torch.exp(logits - lse)
        grad.scatter_add_(1, idx[r0:r0 + rows], -torch.ones_like(lse))
        grad = grad * keep / count
        dh[r0:r0 + rows] = grad @ w
        dw = grad.T @ hb if r0 == 0 else dw + grad.T @ hb
    return {"loss": (loss / count).reshape(1), "dhidden": dh, "dweight": dw}


def check(inputs, outputs, case):
    for k in ("loss", "dhidden", "dweight"):
        if not torch.isfinite(outputs[k].to("cpu", torch.float64)).all():
            return [f"finite: {k} holds inf or NaN"]
    return []


def baseline(inputs, case):
    """What a user runs without regen: logits = hidden @ weight^T in the storage dtype, torch's
    cross_entropy, autograd (the [N, V] logits and their gradient are materialised)."""
    h = inputs["hidden"].detach().requires_grad_(True)
    w = inputs["weight"].detach().requires_grad_(True)
    with torch.enable_grad():
        logits = h @ w.T
        loss = torch.nn.functional.cross_entropy(logits.float(), inputs["targets"],
                                                 ignore_index=IGNORE_INDEX)
        dh, dw = torch.autograd.grad(loss, (h, w))
    return {"loss": loss.detach().reshape(1), "dhidden": dh, "dweight": dw}


def peers():
    """Liger-Kernel's fused linear cross-entropy (chunked over tokens; its forward computes both
    gradients, the backward hands them out) through autograd, as a training loop calls it."""
    def liger_prepare(inputs, case):
        return {"hidden": inputs["hidden"].detach().requires_grad_(True),
                "weight": inputs["weight"].detach().requires_grad_(True),
                "targets": inputs["targets"]}

    def liger(inputs, case):
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        h, w = inputs["hidden"], inputs["weight"]
        with torch.enable_grad():
            loss = liger_fused_linear_cross_entropy(h, w, inputs["targets"],
                                                    ignore_index=IGNORE_INDEX)
            dh, dw = torch.autograd.grad(loss, (h, w))
        return {"loss": loss.detach().float().reshape(1), "dhidden": dh, "dweight": dw}

    return {"liger": (liger_prepare, liger)}
