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
        starting with the invariant's name.

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


def check_oracle(path: Path) -> None:
    """Static check: the required functions exist with the right arity (no import, no torch)."""
    tree = _tree(path)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    arity = {"make_inputs": 2, "reference": 2, "check": 3}
    for name in REQUIRED:
        if name not in funcs:
            raise InputError(f"missing function {name}() (the oracle contract needs "
                             f"{', '.join(REQUIRED)})", file=str(path), field=name)
    for name, fn in funcs.items():
        if name in arity:
            n = len(fn.args.args)
            if n != arity[name]:
                raise InputError(f"{name}() takes {n} arguments; expected {arity[name]}",
                                 file=str(path), field=name, line=fn.lineno)


def oracle_digest(path: Path) -> str:
    """Digest of the oracle's code, insensitive to comments, docstrings and formatting."""
    tree = _tree(path)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    dumped = ast.dump(tree, annotate_fields=False, include_attributes=False)
    return hashlib.sha256(dumped.encode()).hexdigest()


def load_oracle(path: Path):
    """Import an oracle module (worker process only: this imports torch)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"regen_oracle_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
