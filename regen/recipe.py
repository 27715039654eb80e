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
      - repeat: "NL"                     # a group: its launches NL times in order, `layer`
        index: layer                     # (0 .. NL-1) usable in their expressions
        launches: [...]                  # (no group inside a group)
    workspace:                           # scratch buffers regen allocates (poisoned, unless zero)
      - {name: partial, dtype: float32, shape: ["M", "ceil_div(N, 1024)"], zero: true}
                                         # dtype T: the case's dtype
    tensor_maps:                         # cuda only: TMA descriptors over a buffer (regen/tensormap.py)
      - {name: tma_a, tensor: a, dims: ["K", "M"], strides: ["K"], box: [64, 128], swizzle: 128B}
    timeline:                            # optional: the instrumentation contract (regen/timeline.py)
      buffer: timeline                   # an argument name: a null pointer in every judged launch;
      slots: "132 * 256"                 # `regen profile --timeline` passes a zeroed buffer of
      ops: [load, compute, store]        # `slots` 32-byte records to a build with REGEN_TIMELINE;
                                         # `timeline_slots` in expressions: that count (0 unless
                                         # profiled)

Arguments: a tensor or workspace name passes its device pointer, `{tensor: NAME, offset: EXPR}`
the pointer EXPR elements further (a view: one layer of a stacked weight); anything else is an
expression passed as int64 (integers) or float32 (floats) unless typed "int32:", "int64:",
"float32:", "float64:". A tensor map's name passes a 128-byte CUtensorMap (`const __grid_constant__
CUtensorMap` in the kernel), encoded over the buffer that very launch uses. The cpp language calls
`kernel(args...)` once per launch, with no grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag,
                      ValidationError, field_validator, model_validator)

from . import expr, yamlio
from .dtypes import DTYPES, short
from .errors import InputError, pydantic_to_input_error
from .tensormap import BoundTensorMap, bind_map, check_declaration

ARG_TYPES = ("int32", "int64", "float32", "float64")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _parsed(v):
    if isinstance(v, str):
        expr.parse(v)
    return v


# a count or an expression of the case's symbols, parsed when the recipe is read
ExprOrInt = Annotated[Union[str, int], AfterValidator(_parsed)]


class TensorArg(Strict):
    """A buffer passed `offset` elements past its start (a view; the runtime checks the range)."""

    tensor: str
    offset: ExprOrInt = 0


class Launch(Strict):
    kernel: str
    when: str | None = None
    grid: list[str | int] = Field(default_factory=lambda: [1, 1, 1])
    block: list[str | int] = Field(default_factory=lambda: [1, 1, 1])
    shared_mem: str | int = 0
    args: list[TensorArg | str | int | float]

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


class Repeat(Strict):
    """Launches run `repeat` times in order (a decoder's layers), `index` counting 0, 1, ... in
    their expressions (`when`, grid, arguments, offsets)."""

    repeat: ExprOrInt
    index: str = Field(default="i", pattern=r"^[a-z][a-z0-9_]*$")
    launches: list[Launch] = Field(min_length=1)


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


class Timeline(Strict):
    """The instrumentation contract (regen/timeline.py): `buffer` names the argument that carries
    the record buffer; `slots` records of 32 bytes are allocated and zeroed for a profiled run;
    `ops` names the op ids the kernel records."""

    buffer: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    slots: ExprOrInt
    ops: list[str] = Field(min_length=1)


def _item_kind(v) -> str:
    return "group" if isinstance(v, dict) and "repeat" in v or isinstance(v, Repeat) else "launch"


_TAGS = ("launch", "group")   # the union's tags, left out of error locations
Item = Annotated[Union[Annotated[Launch, Tag("launch")], Annotated[Repeat, Tag("group")]],
                 Discriminator(_item_kind)]


class Recipe(Strict):
    launches: list[Item] = Field(min_length=1)
    workspace: list[Workspace] = Field(default_factory=list)
    tensor_maps: list[TensorMap] = Field(default_factory=list)
    timeline: Timeline | None = None

    def all_launches(self) -> list[Launch]:
        """Every launch, those inside repeat groups too (once each), in the written order."""
        return [x for item in self.launches
                for x in (item.launches if isinstance(item, Repeat) else [item])]

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

    @model_validator(mode="after")
    def _timeline_names(self):
        if self.timeline is not None:
            name = self.timeline.buffer
            if name in {w.name for w in self.workspace} | {m.name for m in self.tensor_maps}:
                raise ValueError(f"timeline.buffer: {name!r} is also a workspace or tensor map; "
                                 "the timeline buffer is regen's own (allocated only for a "
                                 "profiled run)")
            if not any(_names_buffer(a, name) for launch in self.all_launches()
                       for a in launch.args):
                raise ValueError(f"timeline.buffer: no launch passes {name!r} as an argument")
        return self


def _names_buffer(arg, name: str) -> bool:
    return arg == name or (isinstance(arg, TensorArg) and arg.tensor == name)


def split_typed(arg: str) -> tuple[str | None, str]:
    head, sep, rest = arg.partition(":")
    if sep and head.strip() in ARG_TYPES:
        return head.strip(), rest.strip()
    return None, arg


@dataclass(frozen=True)
class BoundArg:
    kind: Literal["tensor", "tensormap", "int32", "int64", "float32", "float64"]
    value: object  # tensor name for "tensor", a BoundTensorMap for "tensormap", else the number
    offset: int = 0  # a tensor's: elements past the buffer's start


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
        raise pydantic_to_input_error(_Untagged(exc), source) from None
    except expr.ExprError as exc:
        raise InputError(str(exc), file=source) from None


MAX_REPEAT = 4096   # iterations of one repeat group (a model's layers, not a loop over data)


class _Untagged:
    """A ValidationError's errors with the launch/group union tags left out of each location."""

    def __init__(self, exc: ValidationError):
        self._errors = [{**e, "loc": tuple(p for p in e.get("loc", ()) if p not in _TAGS)}
                        for e in exc.errors()]

    def errors(self):
        return self._errors


def bind(recipe: Recipe, env: dict, buffers, dtype: str, shapes: dict | None = None
         ) -> list[BoundLaunch]:
    """Evaluate the recipe for one case. env: symbols + params; buffers: the tensor and workspace
    names, as a mapping name -> dtype where a launch passes a tensor map (its element type);
    shapes (optional, name -> shape): also check that every map stays inside its buffer.
    The timeline buffer, unless `buffers` holds it (a profiled run), is a null pointer."""
    timeline = recipe.timeline.buffer if recipe.timeline is not None else None
    if timeline is not None:   # the records the kernel may write: none unless profiled
        if "timeline_slots" in env:
            raise ValueError("timeline_slots is a symbol or parameter of this case; the timeline "
                             "contract names the buffer's record count so")
        env = {**env, "timeline_slots": timeline_slots(recipe, env) if timeline in buffers else 0}
    ctx = _Binding(recipe, buffers, dtype, shapes, timeline)
    out = []
    for item in recipe.launches:
        if isinstance(item, Repeat):
            count = expr.evaluate(item.repeat, env)
            if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_REPEAT:
                raise ValueError(f"repeat {item.repeat!r} gives {count!r}; expected an integer "
                                 f"from 0 to {MAX_REPEAT}")
            if item.index in env:
                raise ValueError(f"repeat index {item.index!r} is also a symbol or parameter")
            for i in range(count):
                inner = {**env, item.index: i}
                maps: dict = {}   # a map's expressions may use the index: bound per iteration
                out.extend(ctx.launch(x, inner, maps) for x in item.launches
                           if x.when is None or expr.evaluate(x.when, inner))
        elif item.when is None or expr.evaluate(item.when, env):
            out.append(ctx.launch(item, env, ctx.top_maps))
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


@dataclass
class _Binding:
    """What binding one case's launches shares: the buffers, the declared maps, the timeline."""

    recipe: Recipe
    buffers: object
    dtype: str
    shapes: dict | None
    timeline: str | None

    def __post_init__(self):
        self.maps = {m.name: m for m in self.recipe.tensor_maps}
        self.top_maps: dict[str, BoundTensorMap] = {}

    def launch(self, launch: Launch, env: dict, bound_maps: dict) -> BoundLaunch:
        args = []
        for a in launch.args:
            if isinstance(a, TensorArg):
                if a.tensor not in self.buffers:
                    raise ValueError(f"kernel {launch.kernel}: {{tensor: {a.tensor}}} names no "
                                     "buffer")
                offset = expr.evaluate(a.offset, env)
                if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                    raise ValueError(f"kernel {launch.kernel}: offset {a.offset!r} of {a.tensor} "
                                     f"gives {offset!r}; expected an integer >= 0")
                args.append(BoundArg("tensor", a.tensor, offset))
                continue
            if isinstance(a, str) and a in self.buffers:
                if a in self.maps:
                    raise ValueError(f"tensor map {a!r} has the name of a buffer")
                args.append(BoundArg("tensor", a))
                continue
            if a == self.timeline:   # not profiled: the kernel's instrumentation is compiled out
                args.append(BoundArg("int64", 0))
                continue
            if isinstance(a, str) and a in self.maps:
                if a not in bound_maps:
                    decl = self.maps[a]
                    bound_maps[a] = bind_map(
                        decl.model_dump(), env, _dtype_of(self.buffers, decl.tensor),
                        None if self.shapes is None else self.shapes.get(decl.tensor))
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
        return BoundLaunch(kernel=launch.kernel.replace("{dtype}", short(self.dtype)),
                           grid=grid, block=block,
                           shared_mem=int(expr.evaluate(launch.shared_mem, env)),
                           args=tuple(args))


def tensor_pointer(arg: BoundArg, tensor, where: str) -> int:
    """The device (or host) address a tensor argument passes: its buffer's start, or `offset`
    elements further, which must lie inside the buffer."""
    offset = getattr(arg, "offset", 0)
    if offset:
        if not 0 <= offset < tensor.numel():
            raise RuntimeError(f"{where}: offset {offset} lies outside buffer {arg.value!r} "
                               f"of {tensor.numel()} elements")
        return tensor.data_ptr() + offset * tensor.element_size()
    return tensor.data_ptr()


def timeline_slots(recipe: Recipe, env: dict) -> int:
    """Records the timeline buffer holds for one case (0: the recipe declares none)."""
    if recipe.timeline is None:
        return 0
    n = expr.evaluate(recipe.timeline.slots, env)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"timeline.slots {recipe.timeline.slots!r} gives {n!r}; expected an "
                         "integer >= 1")
    return n


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
