"""Child side: the candidate's outputs against the reference, and its inputs against their
pristine copies.

Every output is filled before every run with a fill drawn per run (buffers.py: NaN with a random
payload, a random value, random values per element, zeros, or the previous launch's outputs), and
a copy of the fill is kept. An element that still holds its fill's bits is suspect; it is
`poisoned-outputs` (never written) when the fill there is not a value a correct output can take
(outside the tolerance of the reference, or NaN where the reference is not), or when it held its
(different) fill in both runs of a case. A correct output that happens to equal a fill is never
refused: no value is a fixed sentinel.
"""

from __future__ import annotations

from .results import CaseResult


class OracleError(Exception):
    """The oracle itself broke its contract or raised: not the candidate's fault."""


class GuardedOracle:
    """The oracle module as the judge calls it: an exception raised inside make_inputs, reference
    or check is the oracle's (`[guard: oracle]`), never reported as the candidate's crash.
    `baseline` is handed out as written (timing it wrapped would change what torch.compile sees;
    its failures are reported beside the timings)."""

    GUARDED = ("make_inputs", "reference", "check")

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        fn = getattr(self._module, name)
        if name not in self.GUARDED:
            return fn

        def call(*args):
            try:
                return fn(*args)
            except OracleError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever the oracle raised is the oracle's
                where = _oracle_frame(exc.__traceback__, self._module)
                raise OracleError(f"{name}() raised {type(exc).__name__}: {exc}{where}"[:1500]) \
                    from exc
        return call


def _oracle_frame(tb, module) -> str:
    """' (oracles/x.py line N)' for the deepest frame inside the oracle's file."""
    path, line = getattr(module, "__file__", None), None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" ({path} line {line})" if path and line else ""


def bits(t):
    """A view of a tensor's raw bytes, so NaN payloads compare equal bit for bit."""
    import torch

    return t.detach().contiguous().view(-1).view(torch.uint8) if t.numel() else t


def bits_of(t):
    """One integer per element holding that element's bits (a view of a contiguous tensor)."""
    import torch

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(-1).view(ints[t.element_size()]) if t.dtype != torch.bool else \
        t.view(-1).view(torch.uint8)


def bound(tol, want):
    """How far an output may be from the reference, per element: atol + rtol * |want| (0 for
    exact dtypes). The one place the tolerance is computed (want: float64)."""
    import torch

    if tol is None:
        return torch.zeros_like(want)
    return tol.atol + tol.rtol * want.abs()


def _index(idx, shape=None):
    if shape is not None:
        import numpy as np

        return tuple(int(i) for i in np.unravel_index(int(idx), tuple(shape)))
    return tuple(int(i) for i in idx.tolist())


def compare(spec, case, got: dict, want: dict, fills: dict | None = None,
            earlier: tuple[dict, dict] | None = None) -> CaseResult:
    """Every output, element by element: fills left, NaN/inf mismatches, then the tolerance.
    `fills`: what each output held before the run (None: not kept); `earlier`: (outputs, fills)
    of the case's other run, for elements that kept their fill in both."""
    tol = spec.case_tolerance(case)
    worst = CaseResult.passed()
    for t in spec.signature.outputs:
        g, w = got[t.name], want.get(t.name)
        if w is None:
            raise OracleError(f"reference() did not return output {t.name!r}")
        if list(w.shape) != list(g.shape):
            raise OracleError(f"reference() returned {t.name} with shape {list(w.shape)}; "
                              f"the signature says {list(g.shape)}")
        fill = (fills or {}).get(t.name)
        other = None
        if earlier is not None and earlier[1].get(t.name) is not None:
            other = (earlier[0][t.name], earlier[1][t.name])
        worst = _compare_output(t.name, g, w, tol, worst, fill, other)
        if not worst.ok:
            return worst
    return worst


def unwritten(g, w, tol, fill, other=None):
    """Elements the candidate never wrote: its fill is still there and is no correct output
    there, or the element held its fill in both runs (the fills differ at every element)."""
    import torch

    if fill is None:
        return None
    kept = bits_of(g.contiguous()) == bits_of(fill.contiguous())
    if not bool(kept.any()):
        return None
    where = g.device if g.device.type == "cpu" else compare_device(g)
    f = fill.detach().reshape(-1).to(where, torch.float64)
    wd = w.detach().reshape(-1).to(where, torch.float64)
    kept = kept.to(where)
    nan_ok = torch.isnan(f) & torch.isnan(wd)
    close = nan_ok | (f == wd) | ((f - wd).abs() <= bound(tol, wd))
    out = kept & ~close
    if other is not None:
        g2, fill2 = other
        out |= kept & (bits_of(g2.contiguous()) == bits_of(fill2.contiguous())).to(where)
    return out if bool(out.any()) else None


def _compare_output(name, g, w, tol, worst: CaseResult, fill=None, other=None) -> CaseResult:
    import torch

    left = unwritten(g, w, tol, fill, other)
    if left is not None:
        idx = _index(left.nonzero()[0, 0], shape=g.shape)
        return CaseResult.failed("poisoned-outputs", f"{name}: {int(left.sum())} of "
                                 f"{g.numel()} elements were never written (the fill left at {idx})")
    where = compare_device(g)
    gd = g.detach().to(where, torch.float64)
    wd = w.detach().to(where, torch.float64)
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
    allowed = bound(tol, wd)
    bad = diff > allowed
    if bad.any():
        idx = _index((diff - allowed).argmax(), shape=gd.shape)
        rule = tol.describe() if tol else "exact dtype: bit for bit"
        return CaseResult.failed(
            "tolerance", f"{name}: {int(bad.sum())} of {g.numel()} elements outside the bound "
            f"({rule}); worst at {idx}: got {gd[idx].item():.9g}, expected "
            f"{wd[idx].item():.9g}, error {diff[idx].item():.3g} > allowed "
            f"{allowed[idx].item():.3g}", worst.max_abs, worst.max_rel)
    return worst


def agree(spec, case, timed: dict, untimed: dict) -> CaseResult:
    """The timed run's outputs against an untimed run's on the same inputs: they may differ only
    as two correct outputs can (within the tolerance of each other)."""
    res = compare(spec, case, timed, untimed)
    if res.ok:
        return res
    return CaseResult.failed(res.guard, "the timed run's output differs from an untimed run on "
                             f"the same inputs: {res.reason}", res.max_abs, res.max_rel)


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
