"""Oracle for specs/cross_entropy.yaml: float64 mean token cross-entropy with ignore_index -100."""

import math

import torch

DISTRIBUTIONS = ("normal", "large", "constant", "neg_inf_mask", "ignore")

IGNORE_INDEX = -100


def _logits(n, v, dist, dtype, g):
    """Logits generated a block of rows at a time, so the 2 GB bench case never needs 8 GB."""
    out = torch.empty(n, v, dtype=dtype)
    rows = max(1, (1 << 24) // max(v, 1))
    for r0 in range(0, n, rows):
        r = min(rows, n - r0)
        if dist == "large":
            block = (torch.rand(r, v, generator=g) * 2 - 1) * 1.0e4
        elif dist == "constant":
            block = (torch.randn(r, 1, generator=g) * 3).expand(r, v)
        else:
            block = torch.randn(r, v, generator=g) * 2
        out[r0:r0 + r] = block.to(dtype)
    return out


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    n, v = case.sizes["N"], case.sizes["V"]
    x = _logits(n, v, case.dist, case.dtype, g)
    targets = torch.randint(0, v, (n,), generator=g)
    if case.dist == "neg_inf_mask":
        # a padded vocabulary at both ends plus scattered masked entries; never a target
        mask = torch.rand(n, v, generator=g) < 0.1
        mask[:, : v // 8] = True
        mask[:, v - v // 8:] = True
        keep = ~mask
        keep[:, v // 2] = True  # at least one live entry per row
        mask = ~keep
        targets = torch.multinomial(keep.double(), 1, generator=g).squeeze(1)
        x = x.masked_fill(mask, float("-inf"))
    if case.dist == "ignore":
        skip = torch.rand(n, generator=g) < 0.25
        skip[0] = True
        skip[n - 1] = False  # never a batch with no counted token
        targets = targets.masked_fill(skip, IGNORE_INDEX)
    return {"logits": x.to(case.dtype).to(case.device),
            "targets": targets.to(torch.int64).to(case.device)}


def _per_token(inputs):
    x = inputs["logits"].to(torch.float64)
    t = inputs["targets"]
    counted = t != IGNORE_INDEX
    picked = x.gather(1, t.clamp(min=0).unsqueeze(1)).squeeze(1)
    return x, picked, counted


def reference(inputs, case):
    x, picked, counted = _per_token(inputs)
    per_token = torch.logsumexp(x, dim=-1) - picked
    return {"loss": per_token[counted].mean().reshape(1)}


def check(inputs, outputs, case):
    loss = float(outputs["loss"].to(torch.float64).reshape(-1)[0].item())
    x, picked, counted = _per_token(inputs)
    v = x.shape[1]
    problems = []
    if not math.isfinite(loss):
        return [f"finite: the loss is {loss}"]
    gap = float((x.max(dim=-1).values - picked)[counted].mean().item())
    slack = 1e-5 * max(1.0, abs(gap))
    if loss < -slack:
        problems.append(f"nonnegative: the loss is {loss:.6g}")
    if not gap - slack <= loss <= gap + math.log(v) + slack:
        problems.append(f"within_logit_gap: the loss {loss:.6g} is outside "
                        f"[{gap:.6g}, {gap + math.log(v):.6g}]")
    if case.dist == "constant" and abs(loss - math.log(v)) > 1e-5 * max(1.0, math.log(v)):
        problems.append(f"uniform_rows_give_log_v: the loss {loss:.8g} is not log(V) = "
                        f"{math.log(v):.8g}")
    return problems


def baseline(inputs, case):
    """What a user runs without regen: torch's cross_entropy on the storage-dtype logits."""
    loss = torch.nn.functional.cross_entropy(inputs["logits"], inputs["targets"], ignore_index=IGNORE_INDEX)
    return {"loss": loss.float().reshape(1)}


def peers():
    """Liger-Kernel's and QuACK's cross-entropy forward (imported when called), mean over the
    counted tokens with ignore_index -100."""
    def liger(inputs, case):
        from liger_kernel.transformers.functional import liger_cross_entropy

        loss = liger_cross_entropy(inputs["logits"], inputs["targets"], ignore_index=-100)
        return {"loss": loss.float().reshape(1)}

    def quack(inputs, case):
        from quack import cross_entropy

        loss = cross_entropy(inputs["logits"], inputs["targets"], ignore_index=-100,
                             reduction="mean")
        return {"loss": loss.float().reshape(1)}

    return {"liger": liger, "quack": quack}
