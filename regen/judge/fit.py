"""Do a spec's tolerances fit the math? Before a spec ships, its bounds are tried against two
honest implementations that need no kernel: the oracle's torch `baseline()` (what a user runs
today) and a naive float32 implementation (the oracle's own `reference()` run with every float64
operation done in float32, then rounded to the output dtype, as a straightforward kernel would).

A naive float32 implementation that does not fit means the tolerance is tighter than float32
arithmetic allows: no honest kernel of the obvious kind can pass. A baseline that does not fit is
reported, not failed: specs may ask for more than arithmetic in the storage dtype gives.

Runs the oracle (project code, trusted) in this process; imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Fit:
    """One implementation on one case: the worst error as a fraction of the allowed bound
    (<= 1 fits), and where it happened."""

    ratio: float = 0.0
    where: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
    error: str | None = None

    @property
    def fits(self) -> bool:
        return self.error is None and self.ratio <= 1.0

    def merge(self, other: Fit) -> Fit:
        if other.error and not self.error:
            return other
        if self.error:
            return self
        worse = other if other.ratio > self.ratio else self
        return Fit(worse.ratio, worse.where, max(self.max_abs, other.max_abs),
                   max(self.max_rel, other.max_rel))


@dataclass
class CaseFit:
    case: str
    dtype: str
    bound: str
    implementations: dict[str, Fit] = field(default_factory=dict)


def float32_arithmetic():
    """A dispatch mode that does every float64 operation in float32: what the oracle's
    higher-precision reference would compute if written naively in float32."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    def down(x):
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64:
            return x.to(torch.float32)
        if x is torch.float64:
            return torch.float32
        return x

    class Float32Arithmetic(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*tree_map(down, args), **tree_map(down, kwargs or {}))

    return Float32Arithmetic()


def worst_ratio(spec, case, got: dict, want: dict) -> Fit:
    """The largest |got - want| / (atol + rtol |want|) over every output (inf where a NaN or inf
    does not match, or where the bound is 0 and the values differ)."""
    import torch

    from .compare import bound

    tol = spec.case_tolerance(case)
    out = Fit()
    for t in spec.signature.outputs:
        g = got[t.name].detach().to("cpu", torch.float64)
        w = want[t.name].detach().to("cpu", torch.float64)
        if list(g.shape) != list(w.shape):
            return Fit(error=f"{t.name}: shape {list(g.shape)}, expected {list(w.shape)}")
        if not g.numel():
            continue
        same = (g == w) | (torch.isnan(g) & torch.isnan(w))
        diff = torch.where(same, torch.zeros_like(g), (g - w).abs())
        diff = torch.nan_to_num(diff, nan=float("inf"))
        allowed = bound(tol, w)
        ratio = torch.where(diff == 0, torch.zeros_like(diff),
                            diff / allowed.clamp_min(1e-300))
        ratio = torch.where((diff > 0) & (allowed == 0), torch.full_like(ratio, float("inf")),
                            ratio)
        idx = int(ratio.argmax())
        finite = torch.isfinite(w) & torch.isfinite(g)
        rel = torch.where(finite, diff / w.abs().clamp_min(1e-30), torch.zeros_like(diff))
        here = Fit(float(ratio.view(-1)[idx]), f"{t.name}{list(_unravel(idx, g.shape))}",
                   float(torch.where(finite, diff, torch.zeros_like(diff)).max()),
                   float(rel.max()))
        out = out.merge(here)
    return out


def _unravel(idx: int, shape) -> tuple[int, ...]:
    out = []
    for d in reversed(list(shape)):
        out.append(idx % d if d else 0)
        idx = idx // d if d else 0
    return tuple(reversed(out))


def fit(spec, oracle, cases, seeds: list[int], device: str = "cpu") -> list[CaseFit]:
    """Every case × seed: the baseline (when the oracle has one) and the naive float32
    implementation against the reference, under the case's resolved tolerance."""
    import torch

    rows = []
    for case in cases:
        env = spec.case_env(case)
        tol = spec.case_tolerance(case)
        view = _view(spec, case, env, device)
        row = CaseFit(case.label(spec.signature.dtypes[0]), env["T"],
                      tol.describe() if tol else "exact")
        for seed in seeds:
            inputs = oracle.make_inputs(view, seed)
            want = oracle.reference({k: v.clone() for k, v in inputs.items()}, view)
            out_dtypes = {t.name: getattr(torch, spec.tensor_dtype(t, case))
                          for t in spec.signature.outputs}
            trials = {}
            if hasattr(oracle, "baseline"):
                trials["baseline"] = lambda: oracle.baseline(
                    {k: v.clone() for k, v in inputs.items()}, view)

            def naive():
                with float32_arithmetic():
                    got = oracle.reference({k: v.clone() for k, v in inputs.items()}, view)
                return got

            trials["naive float32"] = naive
            for name, run in trials.items():
                try:
                    got = run()
                    got = {k: got[k].to(out_dtypes[k]) for k in out_dtypes}
                    result = worst_ratio(spec, case, got, want)
                except Exception as exc:  # noqa: BLE001 - report which implementation broke
                    result = Fit(error=f"{type(exc).__name__}: {exc}"[:300])
                prev = row.implementations.get(name)
                row.implementations[name] = result if prev is None else prev.merge(result)
            del want, inputs
            if device != "cpu":
                torch.cuda.empty_cache()
        rows.append(row)
    return rows


def _view(spec, case, env: dict, device: str):
    from types import SimpleNamespace

    import torch

    params = {p.name: env[p.name] for p in spec.signature.params}
    return SimpleNamespace(sizes=dict(case.sizes), dtype=getattr(torch, env["T"]), params=params,
                           dist=case.dist, device=device,
                           name=case.label(spec.signature.dtypes[0]))


def composed_agreement(spec, oracle, cases, seeds: list[int], device: str = "cpu") -> list[str]:
    """A composed spec whose oracle also has a hand-written reference(): one line per case where
    it and the reference composed from the components differ by more than the case's tolerance
    (regen.oracle.agreement). Either would fail an honest kernel the other passes."""
    from ..oracle import agreement
    from .compare import bound

    problems = []
    if getattr(oracle, "written", None) is None:
        return problems
    for case in cases:
        env = spec.case_env(case)
        tol = spec.case_tolerance(case)
        view = _view(spec, case, env, device)
        for seed in seeds:
            why = agreement(oracle, oracle.make_inputs(view, seed), view,
                            lambda _name, want: bound(tol, want))
            if why:
                problems.append(f"{case.label(spec.signature.dtypes[0])} (seed {seed}): {why}")
                break
    return problems
