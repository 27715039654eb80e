"""Oracle for specs/softmax.yaml: float64 softmax over the last dimension."""

import torch

DISTRIBUTIONS = ("normal", "large", "constant", "neg_inf_mask")


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    if case.dist == "large":
        x = torch.randn(m, n, generator=g) * 1000.0
    elif case.dist == "constant":
        x = torch.full((m, n), float(torch.randn(1, generator=g).item()))
    else:
        x = torch.randn(m, n, generator=g) * 3.0
    if case.dist == "neg_inf_mask":
        mask = torch.rand(m, n, generator=g) < 0.3
        mask[:, 0] = False  # never a fully masked row
        x = x.masked_fill(mask, float("-inf"))
    return {"x": x.to(case.dtype).to(case.device)}


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    return {"y": torch.softmax(x, dim=-1)}


def check(inputs, outputs, case):
    y = outputs["y"].to("cpu", torch.float64)
    problems = []
    n = y.shape[-1]
    if not y.numel():
        return problems
    tol = {torch.float32: 1.5e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}.get(case.dtype, 1.5e-5)
    err = (y.sum(-1) - 1).abs().max().item()
    if not err <= tol * max(1.0, n ** 0.5):  # NaN fails too
        problems.append(f"rows_sum_to_one: a row sums to 1 +- {err:.3g}")
    outside = ~((y >= 0) & (y <= 1))
    if outside.any():
        problems.append(f"in_unit_interval: {int(outside.sum())} elements are outside [0, 1] or NaN")
    return problems


def baseline(inputs, case):
    """What a user runs without regen: torch's softmax in the storage dtype (fp32 math inside)."""
    return {"y": torch.softmax(inputs["x"], dim=-1)}


def peers():
    """Liger-Kernel's LigerSoftmax and QuACK's softmax (imported when called)."""
    def liger(inputs, case):
        from liger_kernel.transformers.functional import liger_softmax

        return {"y": liger_softmax(inputs["x"])}

    def quack(inputs, case):
        from quack import softmax

        return {"y": softmax(inputs["x"])}

    return {"liger": liger, "quack": quack}
