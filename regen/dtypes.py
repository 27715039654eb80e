"""The dtype vocabulary shared by specs, recipes and runtimes (no torch import here)."""

from __future__ import annotations

# name -> (short name used in kernel symbols, bytes per element, C type)
DTYPES: dict[str, tuple[str, int, str]] = {
    "float64": ("f64", 8, "double"),
    "float32": ("f32", 4, "float"),
    "float16": ("f16", 2, "__half"),
    "bfloat16": ("bf16", 2, "__nv_bfloat16"),
    "float8_e4m3fn": ("e4m3", 1, "__nv_fp8_e4m3"),
    "float8_e5m2": ("e5m2", 1, "__nv_fp8_e5m2"),
    "int64": ("i64", 8, "int64_t"),
    "int32": ("i32", 4, "int32_t"),
    "int16": ("i16", 2, "int16_t"),
    "int8": ("i8", 1, "int8_t"),
    "uint8": ("u8", 1, "uint8_t"),
    "bool": ("b8", 1, "bool"),
}
FLOAT_DTYPES = {"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}


def short(name: str) -> str:
    return DTYPES[name][0]


def itemsize(name: str) -> int:
    return DTYPES[name][1]
