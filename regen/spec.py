"""The kernel spec: intent (the prompt), signature, invariants, cases, tolerances, profile.

specs/<kernel>.yaml is the source of truth people review. Validation errors name the file and field.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import expr
from .dtypes import DTYPES, FLOAT_DTYPES, itemsize
from .errors import InputError, pydantic_to_input_error
from .yamlio import read_mapping

NAME_RE = r"^[a-z][a-z0-9_]*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_dtype(value: str, allow_t: bool) -> str:
    if value == "T" and allow_t:
        return value
    if value not in DTYPES:
        raise ValueError(f"unknown dtype {value!r}; expected one of {sorted(DTYPES)}"
                         + (" or T (the case's dtype)" if allow_t else ""))
    return value


class TensorSpec(Strict):
    name: str = Field(pattern=NAME_RE)
    dtype: str = "T"
    shape: list[str | int]
    layout: Literal["contiguous"] = "contiguous"
    inplace_of: str | None = None  # for outputs: the input whose buffer is updated in place
    description: str = ""
    # an OCP MX block format (regen/formats.py): the spec names one logical tensor, the signature
    # holds its storage buffers, derived by expand_formats(): `storage` says which one this is and
    # `logical_shape` is the shape the spec wrote
    format: str | None = None
    storage: Literal["data", "scale"] | None = None
    logical_shape: list[str | int] | None = None

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v):
        return _check_dtype(v, allow_t=True)

    @field_validator("shape")
    @classmethod
    def _shape(cls, v):
        for dim in v:
            if isinstance(dim, str):
                expr.parse(dim)
        return v


class ParamSpec(Strict):
    name: str = Field(pattern=NAME_RE)
    type: Literal["float", "int", "bool"]
    default: float | int | bool | None = None
    description: str = ""


def _storage_tensors(item: dict, where: str) -> list[dict]:
    """A `format:` tensor as its storage buffers: `name` (the packed element codes, uint8) and
    `name_scale` (one E8M0 byte per 32 elements of the last dimension)."""
    from . import formats

    fmt = item["format"]
    if fmt not in formats.MX_FORMATS:
        raise ValueError(f"{where}.format: unknown format {fmt!r}; expected one of "
                         f"{sorted(formats.MX_FORMATS)} (plain float8_e4m3fn and float8_e5m2 "
                         "are dtypes, not formats)")
    if "dtype" in item:
        raise ValueError(f"{where}.dtype: a format tensor is stored as uint8 buffers derived from "
                         f"its format; leave dtype out (format {fmt} declares it)")
    if item.get("inplace_of"):
        raise ValueError(f"{where}.inplace_of: a format tensor cannot be updated in place")
    shape = item.get("shape")
    if not isinstance(shape, list) or not shape:
        raise ValueError(f"{where}.shape: a format tensor needs at least one dimension (its "
                         "last dimension holds the 32-element blocks)")
    last = shape[-1]
    if isinstance(last, str):
        expr.parse(last)
    elif not isinstance(last, int) or isinstance(last, bool) or last % formats.BLOCK:
        raise ValueError(f"{where}.shape: the last dimension {last!r} is not a multiple of "
                         f"{formats.BLOCK} (the MX block)")
    dims = formats.storage(fmt, last)
    name = item.get("name", "")
    desc = item.get("description", "")
    return [
        {**item, "dtype": "uint8", "shape": [*shape[:-1], dims["data"]], "storage": "data",
         "logical_shape": shape},
        {"name": f"{name}_scale", "dtype": "uint8", "shape": [*shape[:-1], dims["scale"]],
         "format": fmt, "storage": "scale", "logical_shape": shape,
         "description": f"E8M0 scales of {name}" + (f" ({desc.strip()})" if desc.strip() else "")},
    ]


class Signature(Strict):
    dtypes: list[str] = Field(default_factory=lambda: ["float32"])
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    params: list[ParamSpec] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _expand_formats(cls, data):
        """A tensor declared with `format:` becomes its storage buffers (a validated signature
        holds those, so buffers, recipes, runtimes and keys all see what a kernel reads)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for side in ("inputs", "outputs"):
            items = data.get(side)
            if not isinstance(items, list):
                continue
            expanded = []
            for i, item in enumerate(items):
                if isinstance(item, dict) and item.get("format") is not None \
                        and item.get("storage") is None:
                    expanded += _storage_tensors(item, f"signature.{side}[{i}]")
                else:
                    expanded.append(item)
            out[side] = expanded
        return out

    @field_validator("dtypes")
    @classmethod
    def _dtypes(cls, v):
        for d in v:
            _check_dtype(d, allow_t=False)
        if not v:
            raise ValueError("at least one dtype is required")
        return v

    @model_validator(mode="after")
    def _names(self):
        reserved = {"T"} | set(DTYPES) | set(expr.FUNCTIONS)
        for t in self.tensors:
            for dim in t.shape:
                clash = expr.names(dim) & reserved if isinstance(dim, str) else set()
                if clash:
                    raise ValueError(f"{t.name}.shape uses the reserved name {sorted(clash)[0]!r} "
                                     "(T is the case's dtype; dtype and function names are taken)")
        for p in self.params:
            if p.name in reserved:
                raise ValueError(f"parameter name {p.name!r} is reserved")
        seen = set()
        for t in [*self.inputs, *self.outputs, *self.params]:
            if t.name in seen:
                raise ValueError(f"name {t.name!r} is used twice in the signature")
            seen.add(t.name)
        self._check_storage()
        inputs = {t.name for t in self.inputs}
        for out in self.outputs:
            if out.inplace_of and out.inplace_of not in inputs:
                raise ValueError(f"output {out.name!r}: inplace_of {out.inplace_of!r} is not an input")
        if not self.outputs:
            raise ValueError("at least one output is required")
        return self

    def _check_storage(self) -> None:
        """Storage buffers written out by hand must be exactly what their format derives."""
        for side in ("inputs", "outputs"):
            items = getattr(self, side)
            for i, t in enumerate(items):
                if t.storage is None and t.logical_shape is not None:
                    raise ValueError(f"{t.name}: logical_shape belongs to a format tensor's "
                                     "storage; declare `format:` instead")
                if t.storage is None and t.format is None or t.storage == "scale":
                    continue
                if t.storage is None or t.logical_shape is None:
                    raise ValueError(f"{t.name}: storage and logical_shape are derived from "
                                     "format; declare only `format:` and the logical shape")
                decl = {k: v for k, v in t.model_dump().items()
                        if k not in ("dtype", "storage", "logical_shape")}
                decl["shape"] = t.logical_shape
                want = _storage_tensors(decl, f"signature.{side}[{i}]")
                got = [x.model_dump() for x in items[i:i + 2]]
                if [TensorSpec.model_validate(w).model_dump() for w in want] != got:
                    raise ValueError(f"{t.name}: its storage buffers differ from what format "
                                     f"{t.format} derives; declare only `format:` and the "
                                     "logical shape")
            for t in items:
                if t.storage == "scale" and not any(
                        d.storage == "data" and f"{d.name}_scale" == t.name for d in items):
                    raise ValueError(f"{t.name}: a scale buffer without its data buffer")

    @property
    def tensors(self) -> list[TensorSpec]:
        return [*self.inputs, *self.outputs]

    def format_tensors(self) -> list[TensorSpec]:
        """The data buffers of the `format:` tensors (their scales follow them, `name_scale`)."""
        return [t for t in self.tensors if t.storage == "data"]

    def symbols(self) -> set[str]:
        """Shape symbols the cases must bind."""
        out: set[str] = set()
        for t in self.tensors:
            for dim in t.shape:
                if isinstance(dim, str):
                    tree_names = expr.names(dim)
                    # a bare name is a symbol; derived dims (e.g. "2*N") use names bound elsewhere
                    out |= tree_names
        return out


class Invariant(Strict):
    name: str = Field(pattern=NAME_RE)
    description: str


def _bound_value(v, field: str):
    """A tolerance bound: a non-negative number, or an expression over the case's symbols and
    parameters (error that grows with a reduction length: "2e-7 * sqrt(N)")."""
    if isinstance(v, bool):
        raise ValueError(f"{field}: expected a number or an expression, got {v!r}")
    if isinstance(v, (int, float)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{field}: expected a finite number >= 0, got {v!r}")
        return float(v)
    expr.parse(v)
    return v


class Tolerance(Strict):
    """allclose per element: |got - want| <= atol + rtol * |want|, in float64."""

    atol: float | str
    rtol: float | str

    @field_validator("atol", "rtol", mode="before")
    @classmethod
    def _bound(cls, v, info):
        return _bound_value(v, info.field_name)


class ToleranceOverride(Strict):
    """A case's own tolerance: the fields it gives replace the dtype's."""

    atol: float | str | None = None
    rtol: float | str | None = None

    @field_validator("atol", "rtol", mode="before")
    @classmethod
    def _bound(cls, v, info):
        return None if v is None else _bound_value(v, info.field_name)


class Bound(NamedTuple):
    """A tolerance resolved for one case; `source` says where each number came from."""

    atol: float
    rtol: float
    source: str

    def describe(self) -> str:
        return f"atol={self.atol:.3g} rtol={self.rtol:.3g}" + (
            f" ({self.source})" if self.source else "")


class Case(Strict):
    """One input configuration. Shape symbols are given as extra keys (M: 4096)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str | None = None
    dtype: str | None = None
    params: dict[str, float | int | bool] = Field(default_factory=dict)
    dist: str = "normal"
    bench: bool = False  # a benchmark case: timed by `regen bench`, checked there once
    tolerance: ToleranceOverride | None = None  # this case's own atol/rtol (numbers or formulas)
    # the columns this case runs on (target names, families, archs, vendors or languages);
    # default every column. A GPU-sized benchmark (a vocabulary GEMM) is no case for the host.
    targets: list[str] | None = None
    # false: a latency-bound case (a few KB, a launch's worth of time) whose time says nothing
    # about bandwidth; it is timed and reported, but the floor_fraction expectation skips it
    floor: bool = True

    def applies_to(self, target) -> bool:
        if self.targets is None:
            return True
        keys = {target.name, target.family_name, target.arch, target.vendor, target.language}
        return bool(keys & set(self.targets))

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v):
        return v if v is None else _check_dtype(v, allow_t=False)

    @property
    def sizes(self) -> dict[str, int]:
        return {k: v for k, v in (self.model_extra or {}).items()}

    def label(self, default_dtype: str) -> str:
        if self.name:
            return self.name
        dims = "x".join(f"{k}{v}" for k, v in self.sizes.items())
        extra = "".join(f",{k}={v}" for k, v in sorted(self.params.items()))
        dist = "" if self.dist == "normal" else f",{self.dist}"
        return f"{dims}:{self.dtype or default_dtype}{extra}{dist}"


# what a speedup expectation may be measured against: the oracle's baseline() (eager, compiled)
# and the fastest of its peers() that ran here with outputs matching the reference
BASELINES = ("torch_eager", "torch_compile", "best_peer")
SPEEDUP_BASELINES = BASELINES


class Profile(Strict):
    """Profile expectations. Selector maps are keyed by target name, arch, vendor or '*'."""

    bytes: str | None = None   # formula over symbols; default: every tensor read or written once
    flops: str | None = None
    # which of a target's flops peaks bounds the flops (flops_<compute>): the inputs' precision
    # where it is not T's (an fp8 GEMM writing bf16: float8; block-scaled: mxfp4); default T
    compute: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    floor_fraction: dict[str, float] = Field(default_factory=dict)
    # baseline -> minimum speed-up on the device columns, and selector -> {baseline: minimum} for
    # any column (the host's too): {torch_compile: 1.0, cpu: {torch_eager: 0.8}}
    speedup: dict[str, float | dict[str, float]] = Field(default_factory=dict)
    # baseline -> minimum geometric mean of the speed-ups over the spec's benchmark cases, on the
    # device columns: a goal stated over a shape set ("1.0x SDPA in geomean") beside a per-case
    # floor in `speedup` ("no row below parity within the run-to-run spread")
    geomean_speedup: dict[str, float] = Field(default_factory=dict)
    memory: str | None = None  # formula: most bytes of outputs + workspace one call may allocate
    max_registers: dict[str, int] = Field(default_factory=dict)
    max_spills: dict[str, int] = Field(default_factory=dict)
    instructions: dict[str, list[str]] = Field(default_factory=dict)  # selector -> mnemonics

    @field_validator("bytes", "flops", "memory")
    @classmethod
    def _formula(cls, v):
        if v is not None:
            expr.parse(v)
        return v

    @field_validator("speedup")
    @classmethod
    def _baselines(cls, v):
        for k, value in v.items():
            if k in BASELINES:
                if isinstance(value, dict):
                    raise ValueError(f"speedup.{k}: expected the minimum speed-up over {k} (a "
                                     "number), got a mapping")
                continue
            if not isinstance(value, dict):
                raise ValueError(f"unknown baseline {k!r}; expected torch_eager, torch_compile or "
                                 "best_peer, "
                                 f"or a target selector (name, family, arch, vendor, language, *) "
                                 f"mapping baselines to minimum speed-ups, e.g. {k}: "
                                 "{torch_eager: 1.0}")
            for b in value:
                if b not in BASELINES:
                    raise ValueError(f"speedup.{k}: unknown baseline {b!r}; expected "
                                     "torch_eager, torch_compile or best_peer")
        return v

    @field_validator("geomean_speedup")
    @classmethod
    def _geomean_baselines(cls, v):
        for k, value in v.items():
            if k not in BASELINES:
                raise ValueError(f"geomean_speedup: unknown baseline {k!r}; expected torch_eager, "
                                 "torch_compile or best_peer")
            if not value > 0:
                raise ValueError(f"geomean_speedup.{k}: expected a positive minimum speed-up, "
                                 f"got {value}")
        return v

    def speedup_for(self, target, on_device: bool) -> dict[str, float]:
        """baseline -> minimum speed-up on one target: the plain entries on device columns, then
        the most specific selector entry (the only kind that reaches the host column)."""
        plain = {k: v for k, v in self.speedup.items() if k in BASELINES} if on_device else {}
        chosen = select({k: v for k, v in self.speedup.items() if k not in BASELINES}, target)
        return {**plain, **(chosen or {})}


class Edge(Strict):
    """Where a component's input (or a composed output) comes from: an input of the composed spec
    (`x`) or an output of an earlier step (`step.tensor`). `view: true` lets a contiguous tensor
    feed an input of another shape with the same number of elements (a reshape, no copy).
    `layer: true` (a repeated step's input): the source is stacked, one slice per iteration along
    its first dimension, and iteration i reads (or, in place, updates) slice i."""

    source: str = Field(alias="from", pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?$")
    view: bool = False
    layer: bool = False
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _short(cls, v):
        return {"from": v} if isinstance(v, str) else v

    @property
    def step(self) -> str | None:
        return self.source.split(".", 1)[0] if "." in self.source else None

    @property
    def tensor(self) -> str:
        return self.source.split(".", 1)[-1]


class Step(Strict):
    """One component call of a composition: which spec, how its shape symbols, parameters and
    dtype are bound (expressions of the composed spec's symbols and parameters), and where each
    of its inputs comes from."""

    name: str = Field(pattern=NAME_RE)
    kernel: str = Field(pattern=NAME_RE)
    sizes: dict[str, str | int] = Field(default_factory=dict)
    params: dict[str, str | int | float | bool] = Field(default_factory=dict)
    dtype: str = "T"
    inputs: dict[str, Edge] = Field(default_factory=dict)
    # a repeated step (a decoder's layers): the component runs `repeat` times (an expression of
    # the spec's symbols, at least 1 on every case); `layer: true` inputs give each iteration its
    # slice, and `carry` feeds iteration i + 1's input (key) from iteration i's output (value)
    repeat: str | int | None = None
    carry: dict[str, str] = Field(default_factory=dict)

    @field_validator("repeat")
    @classmethod
    def _repeat(cls, v):
        if isinstance(v, str):
            expr.parse(v)
        elif v is not None and (isinstance(v, bool) or v < 1):
            raise ValueError(f"expected a count of at least 1 or an expression, got {v!r}")
        return v

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v):
        return _check_dtype(v, allow_t=True)

    @field_validator("sizes", "params")
    @classmethod
    def _exprs(cls, v):
        for text in v.values():
            if isinstance(text, str):
                expr.parse(text)
        return v


class Composition(Strict):
    """A kernel made of other specs: the steps (component calls) and which step output is each
    composed output. Step outputs no composed output names are workspaces between the steps."""

    steps: list[Step] = Field(min_length=1)
    outputs: dict[str, Edge]

    def kernels(self) -> list[str]:
        return sorted({s.kernel for s in self.steps})

    def key_dump(self) -> dict:
        """The composition as keys see it: fields added for repeated steps (repeat, carry, an
        edge's layer) appear only where used, so compositions without them keep their keys."""
        out = self.model_dump(mode="json")
        for step in out["steps"]:
            if step.get("repeat") is None:
                step.pop("repeat", None)
            if not step.get("carry"):
                step.pop("carry", None)
            for edge in step["inputs"].values():
                if not edge.get("layer"):
                    edge.pop("layer", None)
        for edge in out["outputs"].values():
            if not edge.get("layer"):
                edge.pop("layer", None)
        return out


class Spec(Strict):
    name: str = Field(pattern=NAME_RE)
    summary: str
    intent: str
    signature: Signature
    invariants: list[Invariant] = Field(default_factory=list)
    cases: list[Case]
    tolerance: dict[str, Tolerance]
    profile: Profile = Field(default_factory=Profile)
    components: list[str] = Field(default_factory=list)
    composition: Composition | None = None  # the dataflow between components (regen/compose.py)
    targets: list[str] | None = None
    salt: str = ""  # change to force regeneration of this kernel everywhere
    # false: not a library kernel but a technique's unit test (taxonomy/): built, verified and
    # shown by `regen taxonomy`, never a regen.ops op nor part of an exported package. Not in
    # any key (it changes where a kernel is offered, not what it is).
    library: bool = True

    @model_validator(mode="before")
    @classmethod
    def _components_of_composition(cls, data):
        """A composition's kernels are its components; listing them again is optional."""
        if isinstance(data, dict) and isinstance(data.get("composition"), dict) \
                and "components" not in data:
            steps = data["composition"].get("steps")
            if isinstance(steps, list):
                data = {**data, "components": sorted({s["kernel"] for s in steps
                                                      if isinstance(s, dict) and "kernel" in s
                                                      and isinstance(s["kernel"], str)})}
        return data

    @field_validator("tolerance")
    @classmethod
    def _tol_dtypes(cls, v):
        for d in v:
            _check_dtype(d, allow_t=False)
        return v

    @model_validator(mode="after")
    def _consistency(self):
        syms = self.signature.symbols()
        params = {p.name for p in self.signature.params}
        for i, case in enumerate(self.cases):
            dtype = case.dtype or self.signature.dtypes[0]
            if dtype not in self.signature.dtypes:
                raise ValueError(f"cases[{i}]: dtype {dtype!r} is not in signature.dtypes "
                                 f"{self.signature.dtypes}")
            missing = syms - set(case.sizes) - params
            if missing:
                raise ValueError(f"cases[{i}]: shape symbols {sorted(missing)} are not given")
            for k, val in case.sizes.items():
                if not isinstance(val, int) or isinstance(val, bool) or val < 0:
                    raise ValueError(f"cases[{i}].{k}: expected a non-negative integer, got {val!r}")
            unknown = set(case.params) - params
            if unknown:
                raise ValueError(f"cases[{i}].params: unknown parameters {sorted(unknown)}")
            for t in self.signature.format_tensors():
                env = {**{p.name: p.default for p in self.signature.params}, **case.params,
                       **case.sizes}
                last = t.logical_shape[-1]
                n = int(expr.evaluate(last, env)) if isinstance(last, str) else last
                if n % 32:
                    raise ValueError(f"cases[{i}]: {t.name} ({t.format}) has last dimension "
                                     f"{last} = {n}, not a multiple of 32 (the MX block)")
        for d in self.signature.dtypes:
            if d in FLOAT_DTYPES and d not in self.tolerance:
                raise ValueError(f"tolerance: no entry for dtype {d!r} (signature.dtypes lists it)")
        known = syms | params | {"T"}
        for field in ("bytes", "flops", "memory"):
            unknown = expr.names(getattr(self.profile, field) or "0") - known
            if unknown:
                raise ValueError(f"profile.{field}: unknown names {sorted(unknown)} (expected "
                                 f"shape symbols or parameters: {sorted(known)})")
        for d, tol in self.tolerance.items():
            for field in ("atol", "rtol"):
                unknown = expr.names(getattr(tol, field)) - known
                if unknown:
                    raise ValueError(f"tolerance.{d}.{field}: unknown names {sorted(unknown)} "
                                     f"(expected shape symbols or parameters: {sorted(known)})")
        for i, case in enumerate(self.cases):
            if case.tolerance is not None:
                if self.case_env(case)["T"] not in FLOAT_DTYPES:
                    raise ValueError(f"cases[{i}].tolerance: the case's dtype is exact "
                                     "(compared bit for bit); a tolerance does not apply")
                for field in ("atol", "rtol"):
                    unknown = expr.names(getattr(case.tolerance, field) or 0) - known
                    if unknown:
                        raise ValueError(f"cases[{i}].tolerance.{field}: unknown names "
                                         f"{sorted(unknown)} (expected shape symbols or "
                                         f"parameters: {sorted(known)})")
            try:
                self.case_tolerance(case)
            except ValueError as exc:
                raise ValueError(f"cases[{i}]: {exc}") from None
        for i, case in enumerate(self.cases):
            if case.targets is not None and not case.targets:
                raise ValueError(f"cases[{i}].targets: expected at least one column (or leave "
                                 "it out: every column)")
        if not any(not c.bench and c.targets is None for c in self.cases):
            raise ValueError("cases: at least one correctness case (bench: false) for every column "
                             "(no targets:) is required")
        if self.composition is not None:
            self._check_composition(known - {"T"})
        return self

    def _check_composition(self, known: set[str]) -> None:
        """What can be checked without the component specs (regen/compose.py checks the rest)."""
        comp = self.composition
        if sorted(set(self.components)) != comp.kernels():
            raise ValueError(f"components: {sorted(set(self.components))} differ from the kernels "
                             f"the composition calls {comp.kernels()} (leave components out: "
                             "they are taken from the composition)")
        names = [s.name for s in comp.steps]
        inputs = {t.name for t in self.signature.inputs}
        for i, step in enumerate(comp.steps):
            where = f"composition.steps[{i}]"
            if names.count(step.name) > 1:
                raise ValueError(f"{where}.name: step {step.name!r} is named twice")
            if step.name in inputs:
                raise ValueError(f"{where}.name: {step.name!r} is also an input's name")
            for field in ("sizes", "params"):
                for k, text in getattr(step, field).items():
                    unknown = expr.names(text) - known if isinstance(text, str) else set()
                    if unknown:
                        raise ValueError(f"{where}.{field}.{k}: unknown names {sorted(unknown)} "
                                         f"(expected this spec's shape symbols or parameters: "
                                         f"{sorted(known)})")
            for k, edge in step.inputs.items():
                self._check_edge(edge, f"{where}.inputs.{k}", names, inputs)
                if edge.layer and step.repeat is None:
                    raise ValueError(f"{where}.inputs.{k}.layer: only a repeated step (repeat:) "
                                     "reads one slice per iteration")
            if step.repeat is not None:
                unknown = expr.names(step.repeat) - known
                if unknown:
                    raise ValueError(f"{where}.repeat: unknown names {sorted(unknown)} (expected "
                                     f"this spec's shape symbols or parameters: {sorted(known)})")
            elif step.carry:
                raise ValueError(f"{where}.carry: only a repeated step (repeat:) carries a value "
                                 "from one iteration to the next")
            for k, out in step.carry.items():
                if k not in step.inputs:
                    raise ValueError(f"{where}.carry.{k}: {k!r} is not among the step's inputs "
                                     "(the first iteration reads it from there)")
                if step.inputs[k].layer:
                    raise ValueError(f"{where}.carry.{k}: a carried input is one tensor, not a "
                                     "slice per iteration (drop layer: true)")
        outputs = {t.name for t in self.signature.outputs}
        if set(comp.outputs) != outputs:
            missing, extra = sorted(outputs - set(comp.outputs)), sorted(set(comp.outputs) - outputs)
            raise ValueError("composition.outputs: " + "; ".join(
                [f"no source for outputs {missing}" for _ in [1] if missing]
                + [f"{extra} are not outputs of the signature" for _ in [1] if extra]))
        for k, edge in comp.outputs.items():
            if edge.step is None:
                raise ValueError(f"composition.outputs.{k}: expected a step's output "
                                 f"(step.tensor), got the input {edge.source!r}")
            self._check_edge(edge, f"composition.outputs.{k}", names, inputs)

    @staticmethod
    def _check_edge(edge: Edge, where: str, steps: list[str], inputs: set[str]) -> None:
        if edge.step is None and edge.source not in inputs:
            raise ValueError(f"{where}: {edge.source!r} is not an input of this spec "
                             f"(inputs: {sorted(inputs)}; a step's output is step.tensor)")
        if edge.step is not None and edge.step not in steps:
            raise ValueError(f"{where}: unknown step {edge.step!r} (steps: {steps})")

    # -- derived views -------------------------------------------------------------------
    def correctness_cases(self) -> list[Case]:
        return [c for c in self.cases if not c.bench]

    def bench_cases(self, target=None) -> list[Case]:
        return [c for c in self.cases if c.bench and (target is None or c.applies_to(target))]

    def cases_for(self, target) -> list[Case]:
        return [c for c in self.cases if c.applies_to(target)]

    def case_env(self, case: Case) -> dict:
        """Symbols, parameters (defaults applied) and the dtype of one case."""
        env: dict = {p.name: p.default for p in self.signature.params}
        env.update(case.params)
        env.update(case.sizes)
        env["T"] = case.dtype or self.signature.dtypes[0]
        return env

    def case_tolerance(self, case: Case) -> Bound | None:
        """The allclose bound of one case: the case's own fields over its dtype's, formulas
        evaluated over the case's symbols and parameters. None: an exact dtype (bit for bit)."""
        env = self.case_env(case)
        base = self.tolerance.get(env["T"])
        if base is None:
            return None
        values, source = {}, []
        for field in ("atol", "rtol"):
            text = getattr(case.tolerance, field, None) if case.tolerance else None
            where = "case"
            if text is None:
                text, where = getattr(base, field), env["T"]
            try:
                value = float(expr.evaluate(text, env))
            except expr.ExprError as exc:
                raise ValueError(f"tolerance {field} ({where}): {exc}") from None
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"tolerance {field} ({where}): {text!r} gives {value!r} for "
                                 f"this case; expected a finite number >= 0")
            values[field] = value
            if isinstance(text, str) or where == "case":
                source.append(f"{field} {text}" + (" from the case" if where == "case" else ""))
        return Bound(values["atol"], values["rtol"], ", ".join(source))

    def tensor_dtype(self, tensor: TensorSpec, case: Case) -> str:
        return (case.dtype or self.signature.dtypes[0]) if tensor.dtype == "T" else tensor.dtype

    def tensor_shape(self, tensor: TensorSpec, case: Case) -> list[int]:
        env = self.case_env(case)
        return [int(expr.evaluate(d, env)) for d in tensor.shape]

    def case_bytes(self, case: Case) -> int:
        """Bytes that must move: the spec's formula, else every input read and output written once."""
        env = self.case_env(case)
        if self.profile.bytes:
            return int(expr.evaluate(self.profile.bytes, env))
        total = 0
        for t in self.signature.tensors:  # an in-place output is read as its input and written
            n = 1
            for d in self.tensor_shape(t, case):
                n *= d
            total += n * itemsize(self.tensor_dtype(t, case))
        return total

    def case_flops(self, case: Case) -> int:
        return int(expr.evaluate(self.profile.flops, self.case_env(case))) if self.profile.flops else 0


def load_spec(path: Path) -> Spec:
    """Validated spec; the parse is memoised per content on this machine (errors are not)."""
    from .localcache import memo

    try:
        content = path.read_bytes()
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    return memo(f"spec:{path.name}", content, lambda: _load_spec(path))


def _load_spec(path: Path) -> Spec:
    data = read_mapping(path)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise pydantic_to_input_error(exc, str(path)) from None
    except expr.ExprError as exc:
        raise InputError(str(exc), file=str(path)) from None
    if spec.name != path.stem:
        raise InputError(f"expected name {path.stem!r} (the file name), got {spec.name!r}",
                         file=str(path), field="name")
    return spec


def select(mapping: dict, target) -> object | None:
    """Most specific entry of a selector map for a target: name > family > arch > vendor >
    language > '*'."""
    for key in (target.name, target.family_name, target.arch, target.vendor, target.language, "*"):
        if key in mapping:
            return mapping[key]
    return None


def normalise_prose(text: str) -> str:
    """Prose compared for keys: whitespace runs folded, YAML comments are already gone."""
    return re.sub(r"\s+", " ", text).strip()

