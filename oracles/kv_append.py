"""Oracle for specs/kv_append.yaml: the cache with position pos replaced by the new rows. The cache
is drawn from the seed everywhere (position pos too), so an unwritten row is found."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, h, length, d = (case.sizes[s] for s in ("B", "H", "L", "D"))
    cache = torch.randn(b, h, length, d, generator=g)
    new = torch.randn(b, h, d, generator=g)
    return {"cache": cache.to(case.dtype).to(case.device), "new": new.to(case.dtype).to(case.device)}


def reference(inputs, case):
    out = inputs["cache"].to(torch.float64).clone()
    out[:, :, int(case.params["pos"]), :] = inputs["new"].to(torch.float64)
    return {"cache_out": out}


def baseline(inputs, case):
    cache = inputs["cache"].clone()
    cache[:, :, int(case.params["pos"]), :] = inputs["new"]
    return {"cache_out": cache}
