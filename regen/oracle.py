"""Oracles: oracles/<kernel>.py, plain PyTorch, imported only where verification happens.

Contract (nothing from regen is imported by an oracle):

    def make_inputs(case, seed) -> dict[str, torch.Tensor]
        case.sizes  dict of shape symbols    case.dtype   torch dtype of the case (T)
        case.params dict of scalar params    case.dist    input distribution name ("normal", ...)
        case.device torch device string
        Returns every input of the signature, on case.device, contiguous, with the declared dtype.
    def reference(inputs, case) -> dict[str, torch.Tensor]
        Computes every output (in higher precision where it matters); compared in float64.
    def check(inputs, outputs, case) -> list[str]            (optional)
        Invariant checks on the candidate's outputs: one message per violated invariant,
        starting with the invariant's name. Written with a fourth argument,
        check(inputs, outputs, case, reference), it also gets the reference outputs the
        candidate's were compared with (float64), for an invariant stated relative to them
        (the decode step's argmax wherever the reference's top-2 margin is clear);
        case.tolerance holds the case's bound (.atol, .rtol; None for an exact dtype).
    def baseline(inputs, case) -> dict[str, torch.Tensor]    (optional)
        What a user would run without regen (timed beside the kernel).
    def peers() -> dict[str, callable]                         (optional)
        Other implementations of the same outputs (Liger-Kernel, QuACK, ...), each
        fn(inputs, case) -> outputs like baseline(), importing its package inside (lazily):
        `regen bench` times them like the candidate; a missing package or a raise skips one
        with a note. Everything a peer needs lives inside peers() (nested functions): the
        oracle's digest leaves peers() out, since a peer never decides a correct output.
    DISTRIBUTIONS = ("normal", "large", ...)                   (optional; default ("normal",))
        The input distributions make_inputs knows: a case's `dist` must be one of them. A
        declaration read statically; it is not part of the oracle's digest.

A composed spec (specs/K.yaml with `composition:`) needs no reference(): the judge composes it
from the components' references, run in order in float64 (`compose` below), so fixing a component
oracle fixes the composed kernel's. A reference() it does have is checked against the composed
one (`regen tolerance K`), never used in its place.

Every input make_inputs returns must be drawn from the seed (the judge fails an oracle whose
normal-distribution input is the same bits for two seeds: a kernel could recompute it).

Planning never imports an oracle: the static check below reads its AST, and its key is a digest of
the AST (comments and formatting do not count).
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from .errors import InputError

REQUIRED = ("make_inputs", "reference")
OPTIONAL = ("check",)


def _tree(path: Path) -> ast.Module:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError("oracle file not found (expected make_inputs and reference)",
                         file=str(path)) from None
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise InputError(f"Python syntax error: {exc.msg}", file=str(path), line=exc.lineno) from None


def check_oracle(path: Path, composed: bool = False) -> None:
    """Static check: the required functions exist with the right arity (no import, no torch).
    A composed spec's oracle may leave reference() out (the composition is its reference)."""
    tree = _tree(path)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    arity = {"make_inputs": 2, "reference": 2, "check": 3, "peers": 0}
    for name in (("make_inputs",) if composed else REQUIRED):
        if name not in funcs:
            raise InputError(f"missing function {name}() (the oracle contract needs "
                             f"{', '.join(REQUIRED)})", file=str(path), field=name)
    for name, fn in funcs.items():
        if name in arity:
            n = len(fn.args.args)
            if name == "check" and n == 4:   # check(inputs, outputs, case, reference)
                continue
            if n != arity[name]:
                raise InputError(f"{name}() takes {n} arguments; expected {arity[name]}",
                                 file=str(path), field=name, line=fn.lineno)


DECLARATIONS = ("DISTRIBUTIONS",)


def distributions(path: Path) -> tuple[str, ...]:
    """The oracle's DISTRIBUTIONS (a tuple or list of string literals), read without importing."""
    for node in _tree(path).body:
        if _declares(node, "DISTRIBUTIONS"):
            value = node.value
            ok = isinstance(value, (ast.Tuple, ast.List)) and value.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)
            if not ok:
                raise InputError("expected a tuple of distribution names (string literals), e.g. "
                                 "DISTRIBUTIONS = (\"normal\", \"large\")", file=str(path),
                                 field="DISTRIBUTIONS", line=node.lineno)
            return tuple(e.value for e in value.elts)
    return ("normal",)


def _declares(node, name: str) -> bool:
    return (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name)


def _strip_declarations(tree: ast.Module) -> ast.Module:
    """Declarations the loader reads (DISTRIBUTIONS) do not change what the oracle computes,
    unless its code also uses them."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    tree.body = [n for n in tree.body
                 if not any(_declares(n, d) and d not in used for d in DECLARATIONS)]
    return tree


PEERS = "peers"


def _strip_peers(tree: ast.Module) -> ast.Module:
    """peers() names implementations to time against; it computes no reference, input or check,
    so adding or updating a peer verifies nothing again (unless other code calls it)."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if PEERS not in used:
        tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name == PEERS)]
    return tree


def _strip_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _stable_dump(node) -> str:
    """An AST rendering that is the same on every Python version: fields that are None or empty
    lists are left out (3.12 added `type_params=[]` to every def, which ast.dump prints)."""
    if isinstance(node, ast.AST):
        parts = [type(node).__name__]
        for name, value in ast.iter_fields(node):
            if value is None or (isinstance(value, list) and not value):
                continue
            parts.append(f"{name}={_stable_dump(value)}")
        return "(" + " ".join(parts) + ")"
    if isinstance(node, list):
        return "[" + " ".join(_stable_dump(v) for v in node) + "]"
    return repr(node)


def oracle_digest(path: Path) -> str:
    """Digest of the oracle's code, insensitive to comments, docstrings, formatting and the
    Python version reading it."""
    dumped = _stable_dump(_strip_peers(_strip_declarations(_strip_docstrings(_tree(path)))))
    return hashlib.sha256(("oracle-ast-2\n" + dumped).encode()).hexdigest()


def legacy_digests(path: Path) -> dict[str, str]:
    """Digests earlier regen versions computed with `ast.dump`, which differs between Python
    versions; lets records made by them be recognised (and re-keyed) rather than thrown away."""
    out = {}
    for version, extra in (("3.11", ()), ("3.12", ("type_params",))):
        tree = _strip_peers(_strip_declarations(_strip_docstrings(_tree(path))))
        classes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        saved = {cls: cls._fields for cls in classes}
        try:
            for cls in classes:
                if extra and extra[0] not in cls._fields:
                    cls._fields = cls._fields + extra
            for node in ast.walk(tree):
                if extra and isinstance(node, classes) and not hasattr(node, "type_params"):
                    node.type_params = []
            dumped = ast.dump(tree, annotate_fields=False, include_attributes=False)
        finally:
            for cls, fields in saved.items():
                cls._fields = fields
        out[hashlib.sha256(dumped.encode()).hexdigest()] = f"python {version} ast.dump"
    return out


def check_takes_reference(oracle) -> bool:
    """Whether the oracle's check() has the four-argument form (it gets the reference outputs)."""
    import inspect

    fn = getattr(oracle, "check", None)
    try:
        return fn is not None and len(inspect.signature(fn).parameters) == 4
    except (TypeError, ValueError):
        return False


def run_check(oracle, inputs, outputs, case, reference) -> list[str]:
    """An oracle's check() called in the form it is written in (3 or 4 arguments)."""
    module = getattr(oracle, "_module", oracle)   # a GuardedOracle: the form of the wrapped one
    if check_takes_reference(getattr(module, "_module", module)):
        return oracle.check(inputs, outputs, case, reference) or []
    return oracle.check(inputs, outputs, case) or []


def load_oracle(path: Path):
    """Import an oracle module (worker process only: this imports torch). It is registered in
    sys.modules under a name unique to its path, because torch.compile re-imports the module of
    a function it traces (an oracle's baseline() under torch.compile, in regen.ops or a bench)."""
    import importlib.util
    import sys

    path = Path(path).resolve()
    name = f"regen_oracle_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


# -- composed references --------------------------------------------------------------------------
def compose(job: dict, inputs: dict, case, load=None) -> dict:
    """The reference of a composed spec: its components' reference() run in the composition's
    order, every tensor between them kept in float64 (no rounding to a storage dtype), each
    component called with a case of its own (its symbols, parameters and dtype bound from
    `case`). `job` is regen.compose.oracle_job(project, spec); `case` the view an oracle gets.
    Imports torch: call it where oracles run."""
    from types import SimpleNamespace

    import torch

    from . import expr
    from .compose import step_env
    from .spec import Spec

    load = load or _loaded
    env = {**case.sizes, **case.params, "T": str(case.dtype).removeprefix("torch.")}
    values = {k: v for k, v in inputs.items()}

    def f64(x):
        return x.to(torch.float64) if x.dtype.is_floating_point else x

    for step in job["steps"]:
        cspec = Spec.model_validate(step["spec"])
        senv = step_env(_StepView(step), cspec, env)
        view = SimpleNamespace(
            sizes={k: senv[k] for k in step["sizes"]}, dtype=getattr(torch, senv["T"]),
            params={p.name: senv[p.name] for p in cspec.signature.params}, dist=case.dist,
            device=case.device, name=f"{getattr(case, 'name', '')} / {step['name']}")
        shapes = {t.name: [int(expr.evaluate(d, senv)) for d in t.shape]
                  for t in cspec.signature.tensors}

        def call(args, step=step, view=view):
            if "job" in step:   # a composed component: its own composition, in float64 throughout
                return compose(step["job"], args, view, load)
            return load(step["oracle"]).reference(args, view)

        count = step.get("repeat")
        count = None if count is None else int(expr.evaluate(count, env))
        layered, carry = set(step.get("layer", ())), step.get("carry", {})
        stacked: dict = {}    # a per-layer input updated in place: its float64 copy, all slices
        carried: dict = {}    # input -> the previous iteration's output
        for i in range(count or 1):
            args = {}
            for t in cspec.signature.inputs:
                if t.name in carried:
                    x = carried[t.name]
                elif t.name in layered:
                    x = stacked.get(t.name, values[step["inputs"][t.name]])[i]
                else:
                    x = values[step["inputs"][t.name]]
                args[t.name] = f64(x.reshape(shapes[t.name]))
            outs = call(args)
            for t in cspec.signature.outputs:
                if t.name not in outs:
                    raise KeyError(f"{step['kernel']}'s reference() did not return {t.name!r}")
                if t.inplace_of in layered:
                    if t.inplace_of not in stacked:
                        stacked[t.inplace_of] = f64(values[step["inputs"][t.inplace_of]]).clone()
                    buf = stacked[t.inplace_of]
                    buf[i] = f64(outs[t.name]).reshape(buf[i].shape)
            carried = {k: outs[v] for k, v in carry.items()}
        for t in cspec.signature.outputs:
            v = stacked[t.inplace_of] if t.inplace_of in layered else f64(outs[t.name])
            values[f"{step['name']}.{t.name}"] = v
    return {name: values[src] for name, src in job["outputs"].items()}


class _StepView:
    """A step of an oracle job with the attributes regen.compose.step_env reads."""

    def __init__(self, step: dict):
        self.params, self.sizes, self.dtype = step["params"], step["sizes"], step["dtype"]


_ORACLES: dict[str, object] = {}


def _loaded(path: str):
    if path not in _ORACLES:
        _ORACLES[path] = load_oracle(Path(path))
    return _ORACLES[path]


class ComposedOracle:
    """A composed spec's oracle as the judge calls it: make_inputs, check and baseline from its
    own file, reference() composed from the components' (`compose`). `written` is the file's own
    reference(), if any (checked against the composed one by `agreement`)."""

    def __init__(self, module, job: dict):
        self._module, self._job = module, job
        self.written = getattr(module, "reference", None)
        self.__file__ = getattr(module, "__file__", None)

    def reference(self, inputs, case):
        return compose(self._job, inputs, case)

    def __getattr__(self, name):
        if name == "reference":
            raise AttributeError(name)
        return getattr(self._module, name)


def agreement(oracle: "ComposedOracle", inputs, case, bound) -> str | None:
    """Where a composed spec's hand-written reference() and its composed one disagree by more
    than `bound(output name, composed value)` allows (per element; None when they agree)."""
    import torch

    if oracle.written is None:
        return None
    composed = oracle.reference({k: v.clone() for k, v in inputs.items()}, case)
    written = oracle.written({k: v.clone() for k, v in inputs.items()}, case)
    for name, want in composed.items():
        if name not in written:
            return f"the hand-written reference() returns no {name!r}"
        got = written[name].to(torch.float64).reshape(want.shape) if written[name].dtype.is_floating_point \
            else written[name].reshape(want.shape)
        w = want.to(torch.float64)
        g = got.to(torch.float64)
        err = (g - w).abs()
        allowed = bound(name, w)
        bad = ~(err <= allowed) & ~(torch.isnan(g) & torch.isnan(w))
        if bool(bad.any()):
            i = int((err - allowed).nan_to_num(float("inf")).argmax())
            return (f"{name}: the hand-written reference() and the one composed from the "
                    f"components differ at {int(bad.sum())} of {w.numel()} elements; worst at flat "
                    f"index {i}: written {g.reshape(-1)[i].item():.9g}, composed "
                    f"{w.reshape(-1)[i].item():.9g}, allowed {allowed.reshape(-1)[i].item():.3g}")
    return None
