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

from .guards import Rejected
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


def _index(flat: int, shape) -> tuple:
    """A flat element index as the output's coordinates."""
    import numpy as np

    return tuple(int(i) for i in np.unravel_index(int(flat), tuple(shape))) if len(shape) else ()


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


def _flat(t):
    """A flat view (a copy only where the tensor is not contiguous)."""
    return t.detach().reshape(-1)


# Outputs are compared in slices of this many elements: the float64 temporaries of one slice stay
# near 1 GiB whatever the output's size, so a benchmark-sized output (a 16384 x 57344 GEMM, 10^9
# elements) compares on the device in a bounded footprint instead of spilling to the host.
SLICE = 1 << 24


def _slices(n: int):
    """[lo, hi) bounds covering all n elements; a slice size that is not a positive integer (a
    module global an in-process artifact could set) would skip elements, so it is refused."""
    step = SLICE
    if type(step) is not int or step <= 0:
        raise Rejected("harness-integrity", f"the comparison's slice size was changed to {step!r}")
    return ((lo, min(n, lo + step)) for lo in range(0, n, step))


def unwritten(g, w, tol, fill, other=None) -> tuple[int, int | None]:
    """Elements the candidate never wrote: its fill is still there and is no correct output
    there, or the element held its fill in both runs (the fills differ at every element).
    (how many, the flat index of the first)."""
    import torch

    if fill is None:
        return 0, None
    gb, fb = bits_of(g.contiguous()), bits_of(fill.contiguous())
    wf = _flat(w)
    g2b = f2b = None
    if other is not None:
        g2b, f2b = bits_of(other[0].contiguous()), bits_of(other[1].contiguous())
    count, first = 0, None
    for lo, hi in _slices(gb.numel()):
        kept = gb[lo:hi] == fb[lo:hi]
        if not bool(kept.any()):
            continue
        f = fill.detach().reshape(-1)[lo:hi].to(torch.float64)
        wd = wf[lo:hi].to(kept.device, torch.float64)
        nan_ok = torch.isnan(f) & torch.isnan(wd)
        close = nan_ok | (f == wd) | ((f - wd).abs() <= bound(tol, wd))
        out = kept & ~close
        if g2b is not None:
            out |= kept & (g2b[lo:hi] == f2b[lo:hi]).to(kept.device)
        n = int(out.sum())
        if n:
            count += n
            first = lo + int(out.nonzero()[0, 0]) if first is None else first
    return count, first


def _first(mask_of, gf, wf) -> int | None:
    """The flat index of the first element where mask_of(got slice, want slice) holds."""
    import torch

    for lo, hi in _slices(gf.numel()):
        gd = gf[lo:hi].to(torch.float64)
        bad = mask_of(gd, wf[lo:hi].to(gd.device, torch.float64))
        if bool(bad.any()):
            return lo + int(bad.nonzero()[0, 0])
    return None


def _nan_mismatch(gd, wd):
    import torch

    return torch.isnan(gd) != torch.isnan(wd)


def _inf_mismatch(gd, wd):
    import torch

    return (torch.isinf(gd) | torch.isinf(wd)) & (gd != wd) & ~torch.isnan(wd)


def _compare_output(name, g, w, tol, worst: CaseResult, fill=None, other=None) -> CaseResult:
    import torch

    count, first = unwritten(g, w, tol, fill, other)
    if count:
        return CaseResult.failed("poisoned-outputs", f"{name}: {count} of {g.numel()} elements "
                                 f"were never written (the fill left at {_index(first, g.shape)})")
    gf, wf = _flat(g), _flat(w)
    for what, mask_of in (("NaN", _nan_mismatch), ("inf", _inf_mismatch)):
        at = _first(mask_of, gf, wf)
        if at is not None:
            return CaseResult.failed("tolerance", f"{name}: {what} mismatch at "
                                     f"{_index(at, g.shape)}: got {float(gf[at])}, expected "
                                     f"{float(wf[at])}")
    max_abs = max_rel = 0.0
    n_bad, worst_at, worst_excess = 0, None, None
    for lo, hi in _slices(gf.numel()):
        gd = gf[lo:hi].to(torch.float64)
        wd = wf[lo:hi].to(gd.device, torch.float64)
        finite = torch.isfinite(wd) & torch.isfinite(gd)
        diff = torch.where(finite, (gd - wd).abs(), torch.zeros_like(gd))
        rel = torch.where(finite, diff / wd.abs().clamp_min(1e-30), torch.zeros_like(gd))
        max_abs, max_rel = max(max_abs, float(diff.max())), max(max_rel, float(rel.max()))
        # NaN where both are NaN (the bound of a NaN reference): never the worst element
        excess = torch.nan_to_num(diff - bound(tol, wd), nan=float("-inf"))
        bad = int((excess > 0).sum())
        if bad:
            n_bad += bad
            at = int(excess.argmax())
            if worst_excess is None or float(excess[at]) > worst_excess:
                worst_at, worst_excess = lo + at, float(excess[at])
    worst = CaseResult.passed(max(worst.max_abs, max_abs), max(worst.max_rel, max_rel))
    if n_bad:
        gv, wv = float(gf[worst_at]), float(wf[worst_at])
        allowed = float(bound(tol, torch.tensor(wv, dtype=torch.float64)))
        rule = tol.describe() if tol else "exact dtype: bit for bit"
        return CaseResult.failed(
            "tolerance", f"{name}: {n_bad} of {g.numel()} elements outside the bound "
            f"({rule}); worst at {_index(worst_at, g.shape)}: got {gv:.9g}, expected "
            f"{wv:.9g}, error {abs(gv - wv):.3g} > allowed {allowed:.3g}",
            worst.max_abs, worst.max_rel)
    return worst


def agree(spec, case, timed: dict, untimed: dict) -> CaseResult:
    """The timed run's outputs against an untimed run's on the same inputs: they may differ only
    as two correct outputs can (within the tolerance of each other)."""
    res = compare(spec, case, timed, untimed)
    if res.ok:
        return res
    return CaseResult.failed(res.guard, "the timed run's output differs from an untimed run on "
                             f"the same inputs: {res.reason}", res.max_abs, res.max_rel)


def inputs_unchanged(inputs: dict, pristine: dict, inplace: set) -> str | None:
    """Why the inputs are not what regen put there (None when they are, bit for bit)."""
    import torch

    for name, x in inputs.items():
        if name in inplace:
            continue
        if not torch.equal(bits(x), bits(pristine[name])):
            return f"input {name!r} was modified (the spec does not declare it in place)"
    return None
