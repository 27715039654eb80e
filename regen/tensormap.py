"""Tensor maps in a launch recipe: a tiled TMA descriptor over one of the launch's buffers, passed
to a kernel as a 128-byte `const __grid_constant__ CUtensorMap` parameter.

A recipe declares the map (dims, strides and box as expressions of the case's symbols, swizzle,
L2 promotion, out-of-bounds fill); the element type is the buffer's dtype. This module binds a
declaration to one case and checks it against the rules cuTensorMapEncodeTiled enforces, so a bad
map is a one-line error naming the map and the field before anything reaches the driver. The
runtime that launches encodes the bound map over the very buffer each launch uses
(`check_buffer`, then regen/cudadrv.encode_tensor_map): the judge places, poisons and rotates
buffers, so a map is a function of the buffer's address and never outlives it.

Standalone (regen's expression parser and dtype table only): the judge's recipe binder
(regen/recipe.py), regen.ops' launcher and the `regen export` package share it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dtypes import DTYPES
from .expr import evaluate

SWIZZLES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}   # bytes of the swizzle span
L2_PROMOTIONS = {"none": 0, "64B": 64, "128B": 128, "256B": 256}
OOB_FILLS = ("zero", "nan")
MAX_RANK = 5
MAX_BOX = 256
GLOBAL_ALIGN = 16            # the map's base address and every byte stride
MAX_STRIDE = 1 << 40
MAX_DIM = 1 << 32
PARAM_BYTES = 128            # sizeof(CUtensorMap), a kernel parameter aligned to 64

# dtype -> the driver's element type (CUtensorMapDataType without its prefix). Hopper's TMA has no
# 8-bit float type: FP8 tiles move as bytes, as they do for every library.
ELEMENT_TYPES = {"float64": "FLOAT64", "float32": "FLOAT32", "float16": "FLOAT16",
                 "bfloat16": "BFLOAT16", "float8_e4m3fn": "UINT8", "float8_e5m2": "UINT8",
                 "int64": "INT64", "int32": "INT32", "int16": "UINT16", "int8": "UINT8",
                 "uint8": "UINT8", "bool": "UINT8"}
FLOAT_ELEMENT_TYPES = {"FLOAT64", "FLOAT32", "FLOAT16", "BFLOAT16"}


class TensorMapError(ValueError):
    """A tensor map that the driver would refuse, or that would reach outside its buffer."""


@dataclass(frozen=True)
class BoundTensorMap:
    """One declaration evaluated for one case. dims, box: innermost first; strides: in elements,
    of dims 1.. (dim 0 is contiguous)."""
    name: str
    tensor: str
    dtype: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: str = "none"
    l2_promotion: str = "none"
    oob_fill: str = "zero"

    @property
    def element_type(self) -> str:
        return ELEMENT_TYPES[self.dtype]

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def box_bytes(self) -> int:
        """Bytes one copy of a whole box moves (what its mbarrier transaction counts, out-of-bounds
        elements included)."""
        n = self.element_bytes
        for b in self.box:
            n *= b
        return n

    def extent(self) -> int:
        """Elements from the base to the last element the map can address, plus one."""
        return 1 + (self.dims[0] - 1) + sum((d - 1) * s for d, s in zip(self.dims[1:], self.strides))

    def encode_args(self, address: int) -> dict:
        """The arguments of cuTensorMapEncodeTiled as plain numbers (byte strides)."""
        return {"element_type": self.element_type, "rank": len(self.dims), "address": int(address),
                "dims": list(self.dims),
                "strides": [s * self.element_bytes for s in self.strides],
                "box": list(self.box), "element_strides": [1] * len(self.dims),
                "swizzle": SWIZZLES[self.swizzle], "l2_promotion": L2_PROMOTIONS[self.l2_promotion],
                "oob_nan": self.oob_fill == "nan"}

    def key(self, address: int) -> tuple:
        """Everything the encoded map depends on: maps are memoised on it, never on less."""
        return (self.dtype, self.dims, self.strides, self.box, self.swizzle, self.l2_promotion,
                self.oob_fill, int(address))


def check_declaration(decl: dict) -> None:
    """Parse-time checks of one `tensor_maps` entry (plain dict form): ranks agree, the options
    are spelled as regen knows them. Raises ValueError naming the field."""
    dims, strides, box = decl.get("dims") or [], decl.get("strides"), decl.get("box") or []
    if not 1 <= len(dims) <= MAX_RANK:
        raise ValueError(f"dims: expected 1 to {MAX_RANK} dimensions (innermost first), got {len(dims)}")
    want = len(dims) - 1
    if strides is None or len(strides) != want:
        raise ValueError(f"strides: expected {want} element strides (of dims 1..{want}; dim 0 is "
                         f"contiguous), got {0 if strides is None else len(strides)}")
    if len(box) != len(dims):
        raise ValueError(f"box: expected {len(dims)} entries (one per dim), got {len(box)}")
    for field, allowed in (("swizzle", SWIZZLES), ("l2_promotion", L2_PROMOTIONS),
                           ("oob_fill", OOB_FILLS)):
        value = decl.get(field)
        if value is not None and value not in allowed:
            raise ValueError(f"{field}: {value!r} is not one of {', '.join(allowed)}")


def bind_map(decl: dict, env: dict, dtype: str | None, shape: list[int] | None = None
             ) -> BoundTensorMap:
    """A declaration evaluated for one case and checked against the driver's rules for the
    buffer's dtype (and, given its shape, that the map stays inside the buffer)."""
    name, tensor = decl["name"], decl["tensor"]
    where = f"tensor map {name!r} (over {tensor!r})"
    if dtype is None:
        raise TensorMapError(f"{where}: no buffer named {tensor!r} (an input, output or workspace)")
    if dtype not in ELEMENT_TYPES:
        raise TensorMapError(f"{where}: TMA cannot copy {dtype} elements")

    def ints(field):
        out = []
        for i, e in enumerate(decl[field] or []):
            v = evaluate(e, env)
            if isinstance(v, float) and not v.is_integer():
                raise TensorMapError(f"{where}: {field}[{i}] = {e!r} is {v}, not an integer")
            out.append(int(v))
        return tuple(out)

    bound = BoundTensorMap(name=name, tensor=tensor, dtype=dtype, dims=ints("dims"),
                           strides=ints("strides"), box=ints("box"),
                           swizzle=decl.get("swizzle") or "none",
                           l2_promotion=decl.get("l2_promotion") or "none",
                           oob_fill=decl.get("oob_fill") or "zero")
    check_bound(bound, where)
    if shape is not None:
        check_extent(bound, _numel(shape), where)
    return bound


def check_bound(m: BoundTensorMap, where: str) -> None:
    """The numeric rules of cuTensorMapEncodeTiled (no interleave, unit element strides)."""
    esize = m.element_bytes
    for i, d in enumerate(m.dims):
        if not 1 <= d <= MAX_DIM:
            raise TensorMapError(f"{where}: dims[{i}] = {d}; every dim must be 1..2^32 (a case "
                                 "with an empty dimension needs a launch without this map)")
    for i, s in enumerate(m.strides, start=1):
        nbytes = s * esize
        if nbytes <= 0 or nbytes % GLOBAL_ALIGN or nbytes >= MAX_STRIDE:
            raise TensorMapError(f"{where}: strides[{i - 1}] = {s} elements = {nbytes} bytes; a "
                                 f"byte stride must be a positive multiple of {GLOBAL_ALIGN} below "
                                 "2^40 (guard the launch with `when` where rows are not 16-byte "
                                 "aligned)")
    for i, b in enumerate(m.box):
        if not 1 <= b <= MAX_BOX:
            raise TensorMapError(f"{where}: box[{i}] = {b}; every box dim must be 1..{MAX_BOX}")
    inner = m.box[0] * esize
    if inner % 16:
        raise TensorMapError(f"{where}: box[0] = {m.box[0]} elements = {inner} bytes; the inner "
                             "box dim must be a multiple of 16 bytes")
    span = SWIZZLES[m.swizzle]
    if span and inner > span:
        raise TensorMapError(f"{where}: box[0] spans {inner} bytes, more than the {m.swizzle} "
                             f"swizzle span ({span} bytes)")
    if m.oob_fill == "nan" and m.element_type not in FLOAT_ELEMENT_TYPES:
        raise TensorMapError(f"{where}: oob_fill nan needs a floating-point element type; "
                             f"{m.dtype} moves as {m.element_type}")


def check_extent(m: BoundTensorMap, numel: int, where: str) -> None:
    if m.extent() > numel:
        raise TensorMapError(f"{where}: dims {list(m.dims)} with strides {list(m.strides)} reach "
                             f"element {m.extent() - 1}, past the buffer's {numel} elements")


def check_buffer(m: BoundTensorMap, dtype: str, numel: int, address: int) -> None:
    """What only the launch knows: the buffer it was bound over really is this dtype, holds the
    map's extent and starts 16-byte aligned."""
    where = f"tensor map {m.name!r} (over {m.tensor!r})"
    if dtype != m.dtype:
        raise TensorMapError(f"{where}: bound for {m.dtype}, the buffer is {dtype}")
    check_extent(m, numel, where)
    if address % GLOBAL_ALIGN:
        raise TensorMapError(f"{where}: the buffer's address {address:#x} is not "
                             f"{GLOBAL_ALIGN}-byte aligned")


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
