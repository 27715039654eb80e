"""Safe arithmetic over shape symbols and parameters.

Specs (bytes/flops formulas) and launch recipes (grid, block, arguments, workspace shapes) are
declarative: their expressions are parsed with `ast` and evaluated against a whitelist, so neither a
spec nor a generated recipe can run code in the regen process.
"""

from __future__ import annotations

import ast
import math
import operator
from functools import lru_cache

from .dtypes import DTYPES, itemsize


class ExprError(ValueError):
    pass


def _ceil_div(a, b):
    return -(-int(a) // int(b))


def _next_pow2(a):
    a = int(a)
    return 1 if a <= 1 else 1 << (a - 1).bit_length()


FUNCTIONS = {
    "ceil_div": _ceil_div, "cdiv": _ceil_div, "min": min, "max": max, "abs": abs,
    "next_pow2": _next_pow2, "int": int, "float": float, "log2": math.log2, "sqrt": math.sqrt,
    "dsize": lambda name: itemsize(str(name)),
}
_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
}
_CMPOPS = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.Expression:
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse expression {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise ExprError(f"function not allowed in {text!r}; allowed: {sorted(FUNCTIONS)}")
        elif isinstance(node, (ast.Attribute, ast.Subscript, ast.Lambda, ast.ListComp,
                               ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Starred,
                               ast.NamedExpr)):
            raise ExprError(f"construct not allowed in {text!r}: {type(node).__name__}")
    return tree


def names(text: str | int | float) -> set[str]:
    """Free names an expression uses (excluding function names)."""
    if isinstance(text, (int, float)):
        return set()
    tree = parse(str(text))
    funcs = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - funcs


def evaluate(text: str | int | float, env: dict):
    """Evaluate an expression; plain numbers pass through."""
    if isinstance(text, bool):
        return text
    if isinstance(text, (int, float)):
        return text
    return _eval(parse(str(text)).body, env, str(text))


def _eval(node, env, text):
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (int, float, str, bool)):
            return node.value
        raise ExprError(f"constant not allowed in {text!r}")
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in DTYPES:  # dtype names stand for themselves, e.g. dsize(bfloat16)
            return node.id
        raise ExprError(f"unknown name {node.id!r} in {text!r}; known: {sorted(env)}")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, env, text), _eval(node.right, env, text))
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, text)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            return not v
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env, text) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, text)
            if type(op) not in _CMPOPS or not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, text) else node.orelse, env, text)
    if isinstance(node, ast.Call):
        args = [_eval(a, env, text) for a in node.args]
        return FUNCTIONS[node.func.id](*args)
    raise ExprError(f"construct not allowed in {text!r}: {type(node).__name__}")
