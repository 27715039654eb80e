"""Child side: the candidate's outputs against the reference, and its inputs against their
pristine copies. Outputs are poisoned before every run (NaN on the first, a finite sentinel on
the second), so an element the candidate never wrote fails either way (`poisoned-outputs`)."""

from __future__ import annotations

from .results import CaseResult

SENTINEL = 12288.0  # exactly representable in bf16/fp16/fp32 and far from any normalised output


class OracleError(Exception):
    """The oracle itself broke its contract: not the candidate's fault."""


def bits(t):
    """A view of a tensor's raw bytes, so NaN payloads compare equal bit for bit."""
    import torch

    return t.detach().contiguous().view(-1).view(torch.uint8) if t.numel() else t


def poison(buf, kind: str):
    """Fill a buffer with the poison of one run: "nan" (the first) or "sentinel" (the second)."""
    import torch

    if buf.dtype.is_floating_point:
        return buf.fill_(float("nan") if kind == "nan" else SENTINEL)
    if buf.dtype == torch.bool:
        return buf.fill_(True)
    return buf.fill_(-0x5A5A if kind == "nan" else 0x5A5A)


def _index(idx, shape=None):
    if shape is not None:
        import numpy as np

        return tuple(int(i) for i in np.unravel_index(int(idx), tuple(shape)))
    return tuple(int(i) for i in idx.tolist())


def compare(spec, case, got: dict, want: dict, kind: str) -> CaseResult:
    """Every output, element by element: poison left, NaN/inf mismatches, then the tolerance."""
    tol = spec.tolerance.get(spec.case_env(case)["T"])
    worst = CaseResult.passed()
    for t in spec.signature.outputs:
        g, w = got[t.name], want.get(t.name)
        if w is None:
            raise OracleError(f"reference() did not return output {t.name!r}")
        if list(w.shape) != list(g.shape):
            raise OracleError(f"reference() returned {t.name} with shape {list(w.shape)}; "
                              f"the signature says {list(g.shape)}")
        worst = _compare_output(t.name, g, w, kind, tol, worst)
        if not worst.ok:
            return worst
    return worst


def _compare_output(name, g, w, kind, tol, worst: CaseResult) -> CaseResult:
    import torch

    where = compare_device(g)
    gd = g.detach().to(where, torch.float64)
    wd = w.detach().to(where, torch.float64)
    if kind == "sentinel" and g.dtype.is_floating_point:
        unwritten = (gd == SENTINEL) & (wd != SENTINEL)
    elif kind == "nan" and g.dtype.is_floating_point:
        unwritten = torch.isnan(gd) & ~torch.isnan(wd)
    else:
        unwritten = torch.zeros_like(gd, dtype=torch.bool)
    if unwritten.any():
        idx = _index(unwritten.nonzero()[0])
        return CaseResult.failed("poisoned-outputs", f"{name}: {int(unwritten.sum())} of "
                                 f"{g.numel()} elements were never written (poison left at {idx})")
    nan_g, nan_w = torch.isnan(gd), torch.isnan(wd)
    if (nan_g != nan_w).any():
        idx = _index((nan_g != nan_w).nonzero()[0])
        return CaseResult.failed("tolerance", f"{name}: NaN mismatch at {idx}: got "
                                 f"{gd[idx].item()}, expected {wd[idx].item()}")
    inf_bad = (torch.isinf(gd) | torch.isinf(wd)) & (gd != wd) & ~nan_w
    if inf_bad.any():
        idx = _index(inf_bad.nonzero()[0])
        return CaseResult.failed("tolerance", f"{name}: inf mismatch at {idx}: got "
                                 f"{gd[idx].item()}, expected {wd[idx].item()}")
    finite = torch.isfinite(wd) & torch.isfinite(gd)
    diff = torch.where(finite, (gd - wd).abs(), torch.zeros_like(gd))
    rel = diff / wd.abs().clamp_min(1e-30)
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float(torch.where(finite, rel, torch.zeros_like(rel)).max()) if diff.numel() else 0.0
    worst = CaseResult.passed(max(worst.max_abs, max_abs), max(worst.max_rel, max_rel))
    bad = diff > (tol.atol + tol.rtol * wd.abs() if tol is not None else 0)  # exact: ints, bool
    if bad.any():
        idx = _index((diff - (tol.atol + tol.rtol * wd.abs()) if tol else diff).argmax(),
                     shape=gd.shape)
        return CaseResult.failed(
            "tolerance", f"{name}: {int(bad.sum())} of {g.numel()} elements outside "
            f"atol={tol.atol if tol else 0} rtol={tol.rtol if tol else 0}; worst at {idx}: got "
            f"{gd[idx].item():.6g}, expected {wd[idx].item():.6g}", worst.max_abs, worst.max_rel)
    return worst


def compare_device(g):
    """Where to compare one output: float64 arithmetic is exact on either side, and on the GPU
    a benchmark-sized output (10^8 elements) compares in milliseconds, not the host's seconds.
    The host is used where the device lacks room for the float64 temporaries (about 8 copies)."""
    import torch

    if g.device.type == "cpu":
        return "cpu"
    try:
        free, _total = torch.cuda.mem_get_info(g.device)
    except Exception:  # noqa: BLE001 - no memory query on this runtime: stay on the host
        return "cpu"
    return g.device if free > 8 * 8 * g.numel() + (1 << 30) else "cpu"


def inputs_unchanged(inputs: dict, pristine: dict, inplace: set) -> str | None:
    """Why the inputs are not what regen put there (None when they are, bit for bit)."""
    import torch

    for name, x in inputs.items():
        if name in inplace:
            continue
        if not torch.equal(bits(x), bits(pristine[name])):
            return f"input {name!r} was modified (the spec does not declare it in place)"
    return None
