"""An op's signature from its spec, as plain data: the torch schema, and binding a call's tensors
to the spec's shape symbols with clear errors.

Standalone: this module imports nothing of regen but the expression parser (regen/expr.py), so
`regen export` ships it unchanged beside a copy of that parser. Shapes are evaluated here with a
small evaluator that also accepts torch's symbolic sizes (SymInt), so the same code binds a real
call and a fake (meta) one under torch.compile with dynamic shapes.
"""

from __future__ import annotations

from fractions import Fraction

import ast

from ..expr import parse

ALIGN = {"cpu": 64, "cuda": 256}  # base-pointer alignment the target notes promise a kernel


class SignatureError(ValueError):
    """A call that does not fit the spec's signature: names the op, the argument and what was
    expected."""


def _ceil_div(a, b):
    return -(-a // b)


_SHAPE_FUNCTIONS = {"ceil_div": _ceil_div, "cdiv": _ceil_div, "min": min, "max": max, "abs": abs}
_SHAPE_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
              ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
              ast.Mod: lambda a, b: a % b}


def shape_eval(text, env: dict):
    """A shape expression's value over `env`; ints and SymInts alike. Only the integer arithmetic
    shapes use (+ - * // %, ceil_div, min, max); anything else is a SignatureError."""
    if isinstance(text, int):
        return text
    return _eval(parse(str(text)).body, env, text)


def _eval(node, env, text):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise KeyError(node.id)
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _SHAPE_OPS:
        return _SHAPE_OPS[type(node.op)](_eval(node.left, env, text), _eval(node.right, env, text))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, text)
    if isinstance(node, ast.IfExp):  # on a parameter: "1 if per_tensor else M"
        return _eval(node.body if _eval(node.test, env, text) else node.orelse, env, text)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _SHAPE_FUNCTIONS:
        return _SHAPE_FUNCTIONS[node.func.id](*(_eval(a, env, text) for a in node.args))
    raise SignatureError(f"shape expression {text!r}: only + - * // % ceil_div min max and "
                         "`a if p else b` are supported in a shape")


def _names(text) -> set[str]:
    if isinstance(text, int):
        return set()
    tree = parse(str(text))
    funcs = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - funcs


_PROBE = 3 * 2**10  # a multiple of the MX block (32) and of every packing ratio


class Signature:
    """What a spec's `signature:` says, as the op sees it. `data` is the plain form written by
    regen (regen/ops/library.py) or carried by an exported package:

        {"name": K, "dtypes": [...], "inputs": [{"name", "dtype", "shape"}], "outputs": [...],
         "params": [{"name", "type", "default"}]}
    """

    def __init__(self, data: dict, label: str = "regen.ops"):
        self.name = data["name"]
        self.label = f"{label}.{self.name}"  # how errors name the op
        self.dtypes = list(data["dtypes"])
        self.inputs = [dict(t) for t in data["inputs"]]
        # outputs the op returns; an output written over an input (`inplace_of`) is not returned:
        # the op mutates that input, and its schema says so (Tensor(a!))
        outputs = [dict(t) for t in data["outputs"]]
        self.outputs = [t for t in outputs if not t.get("inplace_of")]
        self.inplace = [t for t in outputs if t.get("inplace_of")]
        self.params = [dict(p) for p in data.get("params", [])]
        names = [t["name"] for t in self.inputs]
        for out in self.inplace:
            if out["inplace_of"] not in names:
                raise SignatureError(f"{self.label}: output {out['name']!r} is inplace_of "
                                     f"{out['inplace_of']!r}, which is not an input "
                                     f"({', '.join(names)})")
        self.mutated = [names.index(t["inplace_of"]) for t in self.inplace]
        # a symbol that is only ever part of an expression (swiglu's x: [M, "2 * N"]) is solved
        # from the first dimension that names it alone
        self.symbols = sorted(set().union(*(_names(d) for t in self.inputs for d in t["shape"])))

    # -- the torch schema ------------------------------------------------------------------
    def schema(self) -> str:
        """`rmsnorm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor`; an input an output is
        written over reads `Tensor(a!) logits`."""
        mutated = {self.inputs[i]["name"]: chr(ord("a") + k) for k, i in enumerate(self.mutated)}
        args = [f"Tensor({mutated[t['name']]}!) {t['name']}" if t["name"] in mutated
                else f"Tensor {t['name']}" for t in self.inputs]
        for p in self.params:
            default = p.get("default")
            text = f"{p['type']} {p['name']}"
            if default is not None:
                text += "=" + (("True" if default else "False") if p["type"] == "bool"
                               else repr(float(default)) if p["type"] == "float" else str(int(default)))
            args.append(text)
        outs = "Tensor" if len(self.outputs) == 1 else \
            "(" + ", ".join("Tensor" for _ in self.outputs) + ")"  # "()" when nothing is returned
        return f"{self.name}({', '.join(args)}) -> {outs}"

    def python_signature(self) -> str:
        """How the Python wrapper reads: `rmsnorm(x, weight, eps=1e-06)`."""
        parts = [t["name"] for t in self.inputs]
        for p in self.params:
            parts.append(p["name"] if p.get("default") is None else f"{p['name']}={p['default']!r}")
        return f"{self.name}({', '.join(parts)})"

    # -- binding a call ----------------------------------------------------------------------
    def dtype_of(self, tensors) -> str:
        """T: the dtype of the first input declared T."""
        for spec, t in zip(self.inputs, tensors):
            if spec["dtype"] == "T":
                return str(t.dtype).replace("torch.", "")
        return self.dtypes[0]

    def bind(self, tensors, params) -> dict:
        """Check a call against the signature and return its environment: every shape symbol,
        every parameter and T. Raises SignatureError naming the argument and what was expected.
        Works on fake tensors with symbolic sizes (no data, strides or pointers are read)."""
        op = self.label
        if len(tensors) != len(self.inputs):
            raise SignatureError(f"{op}: expected {len(self.inputs)} tensors "
                                 f"({', '.join(t['name'] for t in self.inputs)}), got {len(tensors)}")
        T = self.dtype_of(tensors)
        if T not in self.dtypes:
            raise SignatureError(f"{op}: dtype {T} is not supported; the spec lists "
                                 f"{', '.join(self.dtypes)}")
        device = None
        for spec, t in zip(self.inputs, tensors):
            want = T if spec["dtype"] == "T" else spec["dtype"]
            got = str(t.dtype).replace("torch.", "")
            if got != want:
                why = " (T, the dtype of the first T input)" if spec["dtype"] == "T" else ""
                raise SignatureError(f"{op}: {spec['name']} has dtype {got}, expected {want}{why}")
            if t.dim() != len(spec["shape"]):
                raise SignatureError(f"{op}: {spec['name']} has {t.dim()} dimensions "
                                     f"{list(t.shape)}, expected {len(spec['shape'])} "
                                     f"{_shape_text(spec['shape'])}")
            if device is None:
                device = t.device
            elif t.device != device:
                raise SignatureError(f"{op}: {spec['name']} is on {t.device}, "
                                     f"{self.inputs[0]['name']} on {device} (one device per call)")
        env: dict = {}
        # parameters first: a shape may depend on one ("1 if per_tensor else M")
        for i, p in enumerate(self.params):  # torch passes a Python kernel no trailing defaults
            env[p["name"]] = params[i] if i < len(params) else p.get("default")
        origin: dict = {}  # symbol -> the dimension it was read from (for messages)
        pending = [(spec, i) for spec in self.inputs for i in range(len(spec["shape"]))]
        progress = True
        while pending and progress:
            progress, later = False, []
            for spec, i in pending:
                if self._bind_dim(spec, i, tensors[self.inputs.index(spec)].shape[i], env,
                                  origin):
                    progress = True
                else:
                    later.append((spec, i))
            pending = later
        if pending:
            spec, i = pending[0]
            raise SignatureError(f"{op}: cannot tell the symbols of {spec['name']}.shape[{i}] "
                                 f"= {spec['shape'][i]!r} from the inputs")
        env["T"] = T
        return env

    def _bind_dim(self, spec, i, size, env, origin) -> bool:
        """Bind or check one dimension; False when it needs a symbol bound elsewhere first."""
        dim = spec["shape"][i]
        unknown = _names(dim) - set(env)
        if isinstance(dim, str) and dim.strip() in unknown and len(unknown) == 1:
            env[dim.strip()] = size
            origin[dim.strip()] = f"{spec['name']}.shape[{i}]"
            return True
        if len(unknown) == 1:  # solve an affine dimension such as "2 * N" for its one symbol
            (name,) = unknown  # probed at a multiple of every packing ("K * 4 // 8", "K // 32")
            b = shape_eval(dim, {**env, name: 0})
            a = Fraction(shape_eval(dim, {**env, name: _PROBE}) - b, _PROBE)
            if a == 0:
                return False
            # integer arithmetic only: under torch.compile `size` is a SymInt, which a Fraction
            # cannot divide; the re-evaluation below rejects a size no integer reaches
            value = ((size - b) * a.denominator) // a.numerator
            if value < 0 or shape_eval(dim, {**env, name: value}) != size:
                raise SignatureError(f"{self.label}: {spec['name']}.shape[{i}] is {size}, "
                                     f"which is not {dim} for any integer {name}")
            env[name] = value
            origin[name] = f"{spec['name']}.shape[{i}]"
            return True
        if unknown:
            return False
        want = shape_eval(dim, env)
        if want != size:
            bound = ", ".join(f"{k}={env[k]} from {origin.get(k, 'a parameter')}"
                              for k in sorted(_names(dim)))
            raise SignatureError(f"{self.label}: {spec['name']}.shape[{i}] is {size}, "
                                 f"expected {dim} = {want} ({bound})")
        return True

    def output_shapes(self, env: dict) -> list[list]:
        return [[shape_eval(d, env) for d in t["shape"]] for t in self.outputs]

    def output_dtypes(self, env: dict) -> list[str]:
        return [env["T"] if t["dtype"] == "T" else t["dtype"] for t in self.outputs]

    def sizes(self, env: dict) -> dict:
        """The shape symbols of a bound call (what a recipe and a case see as sizes)."""
        return {k: env[k] for k in self.symbols}

    def describe(self, env: dict) -> str:
        dims = ", ".join(f"{k}={env[k]}" for k in self.symbols)
        return f"{dims}, {env['T']}"


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"

