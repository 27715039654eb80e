"""Oracle for specs/maxpool3d.yaml: 3x3x3 max pooling, stride 2, no padding, exact."""

import torch
import torch.nn.functional as F

DISTRIBUTIONS = ("normal", "negative", "ties")


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    shape = [case.sizes[k] for k in ("N", "C", "D", "H", "W")]
    if case.dist == "negative":
        x = -(torch.randn(*shape, generator=g).abs() + 1.0)
    elif case.dist == "ties":
        x = torch.randint(-2, 3, shape, generator=g).to(torch.float32)
    else:
        x = torch.randn(*shape, generator=g)
    return {"x": x.to(case.dtype).to(case.device)}


def reference(inputs, case):
    x = inputs["x"].to(torch.float64)
    return {"y": F.max_pool3d(x, kernel_size=3, stride=2, padding=0)}


def _windows(x):
    """[N, C, OD, OH, OW, 27] view of every pooling window."""
    w = x.unfold(2, 3, 2).unfold(3, 3, 2).unfold(4, 3, 2)
    return w.reshape(*w.shape[:5], 27)


def check(inputs, outputs, case):
    problems = []
    windows = _windows(inputs["x"].to(torch.float64))
    y = outputs["y"].to(torch.float64)
    if tuple(y.shape) != tuple(windows.shape[:5]):
        return [f"attained: output shape {tuple(y.shape)}, windows {tuple(windows.shape[:5])}"]
    found = (windows == y.unsqueeze(-1)).any(dim=-1)
    if not bool(found.all()):
        problems.append(f"attained: {int((~found).sum())} outputs are not an element of their window")
    below = (windows > y.unsqueeze(-1)).any(dim=-1) | y.isnan()
    if bool(below.any()):
        problems.append(f"dominates_window: {int(below.sum())} outputs are below an element of "
                        f"their window")
    return problems


def baseline(inputs, case):
    """What a user runs without regen: torch's max_pool3d in the storage dtype."""
    return {"y": F.max_pool3d(inputs["x"], kernel_size=3, stride=2, padding=0)}
