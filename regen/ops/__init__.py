"""regen's verified kernels as PyTorch ops: `import regen.ops` registers every spec of the project
as `torch.ops.regen.<kernel>` (a torch.library custom op whose schema comes from the spec) and
gives a Python function per kernel here, e.g. `regen.ops.rmsnorm(x, weight, eps=1e-06)`. An
output the spec writes over an input (`inplace_of`) makes a mutating op (`Tensor(a!) logits`).
Ops with a backward spec are differentiable: their autograd formulas call the backward ops
(regen/ops/autograd.py).

A call runs the verified artifact of the column for the tensors' device (regen/ops/library.py
says how the column and its artifact are chosen), else the oracle's baseline() with one
RegenOpsWarning per (kernel, reason). Fake implementations make the ops traceable by
torch.compile without graph breaks, and launches go to torch's current stream, so CUDA graphs
capture them (warm a shape up once before capturing it: the first call loads the binary).

Trust: the judge never runs generated code in regen's process (host artifacts run in a sandboxed
process of their own). regen.ops does: a kernel library is code loaded into the caller's process,
and importing regen.ops is the user's explicit decision to run verified artifacts there. Only a
binary whose digest a passing, current verification record names is ever loaded; unverified
artifacts run only when the user opts in (REGEN_OPS_ALLOW_UNVERIFIED=1 or
configure(allow_unverified=True)), with a warning.
"""

from __future__ import annotations

from . import autograd
from .dispatch import KernelOp, RegenOpsWarning, python_function, register, reset_warnings
from .library import ProjectResolver
from .signature import Signature, SignatureError

NAMESPACE = "regen"

_resolver = ProjectResolver()
_ops: dict[str, KernelOp] = {}
_skipped: dict[str, str] = {}  # kernel -> why it is not an op (said when it is asked for)
for _data in _resolver.signatures():
    try:
        _ops[_data["name"]] = KernelOp(Signature(_data, __name__), _resolver, NAMESPACE, __name__)
    except SignatureError as _exc:  # a signature torch.library cannot express (yet)
        _skipped[_data["name"]] = str(_exc)
_library = register(NAMESPACE, list(_ops.values()))
_differentiable = autograd.register(NAMESPACE, _ops, _library, __name__)


for _name, _op in _ops.items():
    globals()[_name] = python_function(_op, __name__, _resolver.project.spec(_name).summary)


def kernels() -> list[str]:
    """The kernels registered as ops."""
    return sorted(_ops)


def differentiable() -> list[str]:
    """The ops with a backward formula (their backward specs' ops; regen/ops/autograd.py)."""
    return sorted(_differentiable)


def skipped() -> dict[str, str]:
    """Specs that are not ops, and why (an import stays quiet; asking for one says it)."""
    return dict(_skipped)


def __getattr__(name: str):
    if name in _skipped:
        raise AttributeError(_skipped[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def configure(allow_unverified: bool | None = None, root=None) -> None:
    """Change what calls may run: `allow_unverified` opts into (or out of) unverified artifacts;
    `root` takes specs, oracles and the cache from another project whose signatures are the ones
    registered. Plans made so far are dropped: the next call decides again."""
    global _resolver
    if root is not None:
        new = ProjectResolver(root, allow_unverified=_resolver.allow_unverified)
        have = {k: op.sig.schema() for k, op in _ops.items()}
        got = {d["name"]: Signature(d, __name__).schema() for d in new.signatures()
               if d["name"] in _ops}
        if got != have:
            differ = sorted(k for k in have if got.get(k) != have[k])
            raise SignatureError(f"{root}: the signatures of {', '.join(differ)} differ from "
                                 "the registered ops (a new process can register them)")
        _resolver = new
    if allow_unverified is not None:
        _resolver.allow_unverified = bool(allow_unverified)
    _resolver._resolved.clear()
    reset_warnings()
    for op in _ops.values():
        op.resolver = _resolver
        op._plans.clear()


def status(device: str = "cpu") -> list[dict]:
    """Per kernel, what a call on `device` runs (verified kernel, unverified artifact, torch
    baseline) and why, in `regen status`'s words."""
    import torch

    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return _resolver.status(d.type, d.index)


def runs(kernel: str, *args) -> str | None:
    """The column a call with these arguments runs ("rmsnorm@cpu"), or None for the baseline."""
    return _ops[kernel].plan_for(*args).column


__all__ = ["RegenOpsWarning", "SignatureError", "configure", "differentiable", "kernels", "runs",
           "skipped", "status", *_ops]
