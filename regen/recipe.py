"""The launch recipe: how regen's own host code calls an artifact's kernels.

An artifact is device code plus this declarative recipe (launch.yaml). No generated host code ever
runs: regen evaluates the recipe's expressions against the case's symbols and parameters and
launches each kernel itself.

    launches:
      - kernel: rmsnorm_{dtype}          # extern "C" symbol; {dtype} -> bf16/f16/f32/...
        when: "N <= 16384"               # optional guard: variants dispatch declaratively
        grid: ["M", 1, 1]                # cuda/hip only
        block: [256, 1, 1]
        shared_mem: "N * 4"              # dynamic shared memory bytes
        args: [x, weight, y, M, N, "float32:eps"]
    workspace:                           # scratch buffers regen allocates (poisoned, unless zero)
      - {name: partial, dtype: float32, shape: ["M", "ceil_div(N, 1024)"], zero: true}
                                         # dtype T: the case's dtype
    tensor_maps:                         # cuda only: TMA descriptors over a buffer (regen/tensormap.py)
      - {name: tma_a, tensor: a, dims: ["K", "M"], strides: ["K"], box: [64, 128], swizzle: 128B}

Arguments: a tensor or workspace name passes its device pointer; anything else is an expression
passed as int64 (integers) or float32 (floats) unless typed "int32:", "int64:", "float32:",
"float64:". A tensor map's name passes a 128-byte CUtensorMap (`const __grid_constant__
CUtensorMap` in the kernel), encoded over the buffer that very launch uses. The cpp language calls
`kernel(args...)` once per launch, with no grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import expr, yamlio
from .dtypes import DTYPES, short
from .errors import InputError, pydantic_to_input_error
from .tensormap import BoundTensorMap, bind_map, check_declaration

ARG_TYPES = ("int32", "int64", "float32", "float64")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Launch(Strict):
    kernel: str
    when: str | None = None
    grid: list[str | int] = Field(default_factory=lambda: [1, 1, 1])
    block: list[str | int] = Field(default_factory=lambda: [1, 1, 1])
    shared_mem: str | int = 0
    args: list[str | int | float]

    @field_validator("grid", "block")
    @classmethod
    def _dims(cls, v):
        if not 1 <= len(v) <= 3:
            raise ValueError("expected 1 to 3 dimensions")
        for d in v:
            if isinstance(d, str):
                expr.parse(d)
        return list(v) + [1] * (3 - len(v))

    @field_validator("args")
    @classmethod
    def _args(cls, v):
        for a in v:
            if isinstance(a, str):
                expr.parse(split_typed(a)[1])
        return v


class Workspace(Strict):
    name: str
    dtype: str
    shape: list[str | int]
    zero: bool = False

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v):
        if v not in DTYPES and v != "T":
            raise ValueError(f"unknown dtype {v!r}; expected one of {sorted(DTYPES)} or T (the "
                             "case's dtype)")
        return v


class TensorMap(Strict):
    """A tiled TMA descriptor over one buffer: dims and box innermost first, strides in elements
    of dims 1.. (dim 0 is contiguous), the element type the buffer's dtype."""
    name: str
    tensor: str
    dims: list[str | int]
    strides: list[str | int]
    box: list[str | int]
    swizzle: str = "none"
    l2_promotion: str = "none"
    oob_fill: str = "zero"

    @field_validator("dims", "strides", "box")
    @classmethod
    def _exprs(cls, v):
        for d in v:
            if isinstance(d, str):
                expr.parse(d)
        return v

    @model_validator(mode="after")
    def _rules(self):
        check_declaration(self.model_dump())
        return self


class Recipe(Strict):
    launches: list[Launch] = Field(min_length=1)
    workspace: list[Workspace] = Field(default_factory=list)
    tensor_maps: list[TensorMap] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names(self):
        seen: set[str] = set()
        for m in self.tensor_maps:
            if m.name in seen:
                raise ValueError(f"tensor_maps: {m.name!r} is declared twice")
            seen.add(m.name)
        clash = seen & {w.name for w in self.workspace}
        if clash:
            raise ValueError(f"tensor_maps: {sorted(clash)[0]!r} is also a workspace name")
        return self


def split_typed(arg: str) -> tuple[str | None, str]:
    head, sep, rest = arg.partition(":")
    if sep and head.strip() in ARG_TYPES:
        return head.strip(), rest.strip()
    return None, arg


@dataclass(frozen=True)
class BoundArg:
    kind: Literal["tensor", "tensormap", "int32", "int64", "float32", "float64"]
    value: object  # tensor name for "tensor", a BoundTensorMap for "tensormap", else the number


@dataclass(frozen=True)
class BoundLaunch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple[BoundArg, ...]


def parse_recipe(text: str, source: str = "launch.yaml") -> Recipe:
    try:
        data = yamlio.load(text)
    except yamlio.yaml.YAMLError as exc:  # one line, like yamlio.read_yaml: the problem and its line
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"YAML syntax error: {problem}", file=source,
                         line=mark.line + 1 if mark is not None else None) from None
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise pydantic_to_input_error(exc, source) from None
    except expr.ExprError as exc:
        raise InputError(str(exc), file=source) from None


def bind(recipe: Recipe, env: dict, buffers, dtype: str, shapes: dict | None = None
         ) -> list[BoundLaunch]:
    """Evaluate the recipe for one case. env: symbols + params; buffers: the tensor and workspace
    names, as a mapping name -> dtype where a launch passes a tensor map (its element type);
    shapes (optional, name -> shape): also check that every map stays inside its buffer."""
    out = []
    maps = {m.name: m for m in recipe.tensor_maps}
    bound_maps: dict[str, BoundTensorMap] = {}
    for launch in recipe.launches:
        if launch.when is not None and not expr.evaluate(launch.when, env):
            continue
        args = []
        for a in launch.args:
            if isinstance(a, str) and a in buffers:
                if a in maps:
                    raise ValueError(f"tensor map {a!r} has the name of a buffer")
                args.append(BoundArg("tensor", a))
                continue
            if isinstance(a, str) and a in maps:
                if a not in bound_maps:
                    decl = maps[a]
                    bound_maps[a] = bind_map(decl.model_dump(), env, _dtype_of(buffers, decl.tensor),
                                             None if shapes is None else shapes.get(decl.tensor))
                args.append(BoundArg("tensormap", bound_maps[a]))
                continue
            typ, text = split_typed(a) if isinstance(a, str) else (None, a)
            val = expr.evaluate(text, env)
            if typ is None:
                typ = "float32" if isinstance(val, float) else "int64"
            val = float(val) if typ.startswith("float") else int(val)
            args.append(BoundArg(typ, val))
        grid = tuple(int(expr.evaluate(d, env)) for d in launch.grid)
        block = tuple(int(expr.evaluate(d, env)) for d in launch.block)
        out.append(BoundLaunch(
            kernel=launch.kernel.replace("{dtype}", short(dtype)),
            grid=grid, block=block, shared_mem=int(expr.evaluate(launch.shared_mem, env)),
            args=tuple(args)))
    if not out:
        raise ValueError("no launch of the recipe applies to this case (every `when` is false)")
    return out


def _dtype_of(buffers, name: str) -> str | None:
    if name not in buffers:
        return None
    if not hasattr(buffers, "get"):
        raise ValueError(f"a tensor map over {name!r} needs the buffers' dtypes (bind(..., buffers="
                         "{name: dtype}))")
    value = buffers.get(name)
    return value if isinstance(value, str) else dtype_name(value)


def dtype_name(tensor) -> str:
    """regen's dtype name of a torch tensor (or of a torch dtype)."""
    return str(getattr(tensor, "dtype", tensor)).removeprefix("torch.")


def buffer_dtypes(buffers: dict) -> dict[str, str]:
    """name -> dtype name of a dict of torch tensors (what bind takes for tensor maps)."""
    return {k: dtype_name(v) for k, v in buffers.items()}


def workspace_shapes(recipe: Recipe, env: dict) -> dict[str, tuple[str, list[int], bool]]:
    """Per workspace: dtype (T resolved to the case's dtype), shape and whether it is zeroed."""
    return {w.name: (env["T"] if w.dtype == "T" else w.dtype,
                     [int(expr.evaluate(d, env)) for d in w.shape], w.zero)
            for w in recipe.workspace}


def buffer_layouts(spec, recipe: Recipe, env: dict) -> tuple[dict[str, str], dict[str, list[int]]]:
    """(name -> dtype, name -> shape) of every buffer one case's launches can name: the spec's
    tensors and the recipe's workspaces (what bind checks tensor maps against)."""
    dtypes, shapes = {}, {}
    for t in spec.signature.tensors:
        dtypes[t.name] = env["T"] if t.dtype == "T" else t.dtype
        shapes[t.name] = [int(expr.evaluate(d, env)) for d in t.shape]
    for name, (dt, shape, _zero) in workspace_shapes(recipe, env).items():
        dtypes[name], shapes[name] = dt, shape
    return dtypes, shapes
