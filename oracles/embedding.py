"""Oracle for specs/embedding.yaml: a row gather."""

import torch

DISTRIBUTIONS = ("normal",)


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, v, h = case.sizes["B"], case.sizes["V"], case.sizes["H"]
    table = torch.randn(v, h, generator=g)
    ids = torch.randint(0, v, (b,), generator=g, dtype=torch.int64)
    return {"ids": ids.to(case.device), "table": table.to(case.dtype).to(case.device)}


def reference(inputs, case):
    return {"y": inputs["table"].to(torch.float64)[inputs["ids"]]}


def check(inputs, outputs, case):
    want = inputs["table"][inputs["ids"]]
    same = torch.equal(outputs["y"].view(torch.int16), want.view(torch.int16)) \
        if want.dtype == torch.bfloat16 else torch.equal(outputs["y"], want)
    return [] if same else ["rows_copied: a row of y differs from the table row its id names"]


def baseline(inputs, case):
    return {"y": torch.nn.functional.embedding(inputs["ids"], inputs["table"])}
