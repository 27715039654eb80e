"""Oracle for specs/cross_entropy_bwd.yaml: float64 mean cross-entropy (ignore_index -100) and
its gradient with respect to the logits."""

import math

import torch

DISTRIBUTIONS = ("normal", "large", "neg_inf_mask", "ignore")

IGNORE_INDEX = -100


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    n, v = case.sizes["N"], case.sizes["V"]
    x = torch.empty(n, v, dtype=case.dtype)
    rows = max(1, (1 << 24) // max(v, 1))   # a block of rows at a time: the bench case is 2 GB
    for r0 in range(0, n, rows):
        r = min(rows, n - r0)
        block = ((torch.rand(r, v, generator=g) * 2 - 1) * 1.0e4 if case.dist == "large"
                 else torch.randn(r, v, generator=g) * 2)
        x[r0:r0 + r] = block.to(case.dtype)
    targets = torch.randint(0, v, (n,), generator=g)
    if case.dist == "neg_inf_mask":
        mask = torch.rand(n, v, generator=g) < 0.1
        mask[:, : v // 8] = True
        mask[:, v - v // 8:] = True
        keep = ~mask
        keep[:, v // 2] = True
        targets = torch.multinomial(keep.double(), 1, generator=g).squeeze(1)
        x = x.masked_fill(~keep, float("-inf"))
    if case.dist == "ignore":
        skip = torch.rand(n, generator=g) < 0.25
        skip[0] = True
        skip[n - 1] = False
        targets = targets.masked_fill(skip, IGNORE_INDEX)
    return {"logits": x.to(case.device), "targets": targets.to(case.device)}


def reference(inputs, case):
    x = inputs["logits"].to(torch.float64)
    t = inputs["targets"]
    counted = t != IGNORE_INDEX
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    picked = x.gather(1, t.clamp(min=0).unsqueeze(1))
    count = counted.sum()
    loss = ((lse - picked).squeeze(1)[counted]).sum() / count
    grad = torch.exp(x - lse)
    grad.scatter_add_(1, t.clamp(min=0).unsqueeze(1), -torch.ones_like(picked))
    grad = grad / count * counted.unsqueeze(1)
    return {"loss": loss.reshape(1), "dlogits": grad}


def check(inputs, outputs, case):
    loss = float(outputs["loss"].to(torch.float64).reshape(-1)[0].item())
    if not math.isfinite(loss):
        return [f"finite: the loss is {loss}"]
    grad = outputs["dlogits"].to("cpu", torch.float64)
    if not torch.isfinite(grad).all():
        return ["finite: the gradient holds inf or NaN"]
    return []


def baseline(inputs, case):
    """What a user runs without regen: autograd through torch's cross_entropy (forward and
    backward; torch writes the gradient to a new tensor)."""
    x = inputs["logits"].detach().requires_grad_(True)
    with torch.enable_grad():
        loss = torch.nn.functional.cross_entropy(x, inputs["targets"], ignore_index=IGNORE_INDEX)
        (dx,) = torch.autograd.grad(loss, (x,))
    return {"loss": loss.detach().float().reshape(1), "dlogits": dx}


def peers():
    """Liger-Kernel's cross-entropy (its forward computes the gradient and stores it over the
    logits; the backward only scales it) and QuACK's (loss and gradient in one forward with
    inplace_backward)."""
    def liger_prepare(inputs, case):
        return {"logits": inputs["logits"].detach().requires_grad_(True),
                "targets": inputs["targets"]}

    def liger(inputs, case):
        from liger_kernel.transformers.functional import liger_cross_entropy

        x = inputs["logits"]
        with torch.enable_grad():
            loss = liger_cross_entropy(x, inputs["targets"], ignore_index=IGNORE_INDEX)
            (dx,) = torch.autograd.grad(loss, (x,))
        return {"loss": loss.detach().float().reshape(1), "dlogits": dx}

    def quack(inputs, case):
        from quack.cross_entropy import cross_entropy_fwd

        t = inputs["targets"]
        losses, dx = cross_entropy_fwd(inputs["logits"], t, ignore_index=IGNORE_INDEX,
                                       return_dx=True, inplace_backward=True)
        count = (t != IGNORE_INDEX).sum()
        return {"loss": (losses.sum() / count).float().reshape(1), "dlogits": dx / count}

    return {"liger": (liger_prepare, liger), "quack": quack}
