"""Safe arithmetic over shape symbols and parameters.

Specs (bytes/flops formulas) and launch recipes (grid, block, arguments, workspace shapes) are
declarative: their expressions are parsed with `ast` and evaluated against a whitelist, so neither a
spec nor a generated recipe can run code in the regen process.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
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


# Bounds no formula comes near: a bigger integer or a deeper expression is refused, not computed
# (an exponent or shift can otherwise ask for a number with billions of digits).
MAX_INT_BITS = 4096
MAX_DEPTH = 100

_UNARYOPS = (ast.USub, ast.UAdd, ast.Not)
_ALLOWED = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp,
            ast.And, ast.Or, ast.Compare, ast.IfExp, ast.Call, *_BINOPS, *_CMPOPS, *_UNARYOPS)


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.Expression:
    """The expression's syntax tree, if it uses only the allowed constructs (raises ExprError)."""
    try:
        with warnings.catch_warnings():  # e.g. "1if": a user's formula, not regen's code
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse expression {text!r}: {exc.msg}") from None
    except (ValueError, MemoryError, RecursionError):  # null bytes; nesting the parser refuses
        raise ExprError(f"cannot parse expression {text!r}: too deeply nested or not text") from None
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExprError(f"expression nested more than {MAX_DEPTH} deep in {text!r}")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise ExprError(f"function not allowed in {text!r}; allowed: {sorted(FUNCTIONS)}")
            if node.keywords:
                raise ExprError(f"keyword arguments not allowed in {text!r}")
        elif isinstance(node, ast.Constant):
            if type(node.value) not in (int, float, str, bool):
                raise ExprError(f"constant not allowed in {text!r}")
        elif isinstance(node, ast.Name) and node.id.startswith("__"):
            raise ExprError(f"name not allowed in {text!r}: {node.id}")
        elif not isinstance(node, _ALLOWED):
            raise ExprError(f"construct not allowed in {text!r}: {type(node).__name__}")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree


def names(text: str | int | float) -> set[str]:
    """Free names an expression uses (excluding function names)."""
    if isinstance(text, (int, float)):
        return set()
    tree = parse(str(text))
    funcs = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - funcs


def evaluate(text: str | int | float, env: dict):
    """Evaluate an expression; plain numbers pass through. Any failure is an ExprError that quotes
    the expression (division by zero, a math domain error, a number too large, a wrong type)."""
    if isinstance(text, bool):
        return text
    if isinstance(text, (int, float)):
        return text
    tree = parse(str(text))
    try:
        return _eval(tree.body, env, str(text))
    except ExprError:
        raise
    except (ArithmeticError, TypeError, ValueError, KeyError, RecursionError) as exc:
        raise ExprError(f"cannot evaluate {text!r}: {type(exc).__name__}: {exc}") from None


def _number(value, text):
    if isinstance(value, (int, float)):  # bool is an int
        return value
    raise ExprError(f"arithmetic on {type(value).__name__} {value!r} in {text!r}")


def _checked(value, text):
    """A result within the bounds: real, and an integer of at most MAX_INT_BITS bits."""
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ExprError(f"integer of more than {MAX_INT_BITS} bits in {text!r}")
    if isinstance(value, complex):
        raise ExprError(f"complex result in {text!r}")
    return value


def _binop(op, a, b, text):
    a, b = _number(a, text), _number(b, text)
    if isinstance(a, int) and isinstance(b, int):  # refuse before computing a huge number
        if isinstance(op, ast.Pow) and b > 0 and abs(a) > 1 and b * (a.bit_length() - 1) > MAX_INT_BITS:
            raise ExprError(f"integer of more than {MAX_INT_BITS} bits in {text!r}")
        if isinstance(op, ast.LShift) and a and b > 0 and a.bit_length() + b > MAX_INT_BITS:
            raise ExprError(f"integer of more than {MAX_INT_BITS} bits in {text!r}")
    return _checked(_BINOPS[type(op)](a, b), text)


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
        return _binop(node.op, _eval(node.left, env, text), _eval(node.right, env, text), text)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, text)
        if isinstance(node.op, ast.USub):
            return -_number(v, text)
        if isinstance(node.op, ast.UAdd):
            return +_number(v, text)
        if isinstance(node.op, ast.Not):
            return not v
    if isinstance(node, ast.BoolOp):  # short-circuits, as guards like "N > 0 and M // N > 2" need
        vals = (_eval(v, env, text) for v in node.values)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, text)
            if type(op) not in _CMPOPS:
                raise ExprError(f"comparison not allowed in {text!r}: {type(op).__name__}")
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, text) else node.orelse, env, text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        args = [_eval(a, env, text) for a in node.args]
        return _checked(FUNCTIONS[node.func.id](*args), text)
    raise ExprError(f"construct not allowed in {text!r}: {type(node).__name__}")


def substitute(text: str | int | float, mapping: dict[str, str]) -> str | int | float:
    """The expression with each free name in `mapping` replaced by (its expression), all at once:
    a component's recipe expressions rewritten over a composed spec's symbols (regen/compose.py)."""
    if isinstance(text, (int, float)) or not (names(text) & set(mapping)):
        return text
    import copy

    tree = copy.deepcopy(parse(str(text)))   # parse() is memoised: never edit its tree
    funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}

    class Swap(ast.NodeTransformer):
        def visit_Name(self, node):
            if id(node) in funcs or node.id not in mapping:
                return node
            return copy.deepcopy(parse(str(mapping[node.id])).body)

    return ast.unparse(Swap().visit(tree)).strip()
