"""Low-precision number formats: FP8 (e4m3fn, e5m2), the OCP MX element types (FP6 e2m3/e3m2,
FP4 e2m1), E8M0 scales and the MX block formats built from them (OCP Microscaling Formats v1.0).

Oracles quantize and dequantize with this module in float64, so a reference never depends on a
device's conversion instructions; the spec language (regen/spec.py) uses `storage()` to derive the
packed buffers a `format:` tensor is stored in. Pure numpy: no torch import, usable by commands
that need no GPU.

Storage conventions (what kernels read):
  element codes   sign | exponent | mantissa, the sign in the code's top bit (bit 7, 5 or 3)
  mxfp8           one code per byte                         data [..., K]
  mxfp6           4 codes in 3 bytes, little-endian bit stream: code i at bits 6i..6i+5 of the
                  24-bit word b0 | b1 << 8 | b2 << 16        data [..., K * 3 / 4]
  mxfp4           2 codes per byte, element 2i in the low nibble, 2i+1 in the high nibble
                                                            data [..., K / 2]
  scales          one E8M0 byte per 32 consecutive elements of the last dimension: 2^(code - 127),
                  code 255 is NaN                           scale [..., K / 32]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

BLOCK = 32  # elements sharing one scale (OCP MX: k = 32 for every concrete format)
E8M0_BIAS = 127
E8M0_NAN = 0xFF


@dataclass(frozen=True)
class Element:
    """A small float: sign bit, `ebits` exponent bits with `bias`, `mbits` mantissa bits."""

    name: str
    ebits: int
    mbits: int
    bias: int
    nan: str  # "none": every code finite; "all_ones": only S.1111.111 is NaN (e4m3fn);
    #           "ieee": exponent all ones is inf (mantissa 0) or NaN (e5m2)

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def emax(self) -> int:
        """Exponent of the largest normal value (the OCP table's emax_elem)."""
        top = (1 << self.ebits) - 1
        return (top - 1 if self.nan == "ieee" else top) - self.bias

    @property
    def max(self) -> float:
        return float(self.values()[self.values_finite_max_code()])

    def values_finite_max_code(self) -> int:
        vals = self.values()
        half = 1 << (self.bits - 1)
        finite = [c for c in range(half) if np.isfinite(vals[c])]
        return max(finite)

    def values(self) -> np.ndarray:
        return _decode_table(self)


E4M3 = Element("e4m3", 4, 3, 7, "all_ones")
E5M2 = Element("e5m2", 5, 2, 15, "ieee")
E2M3 = Element("e2m3", 2, 3, 1, "none")
E3M2 = Element("e3m2", 3, 2, 3, "none")
E2M1 = Element("e2m1", 2, 1, 1, "none")
ELEMENTS = {e.name: e for e in (E4M3, E5M2, E2M3, E3M2, E2M1)}
# the torch dtype names of the byte-sized ones
DTYPE_ELEMENTS = {"float8_e4m3fn": E4M3, "float8_e5m2": E5M2}


@dataclass(frozen=True)
class MXFormat:
    """An OCP MX block format: `BLOCK` elements of one type sharing an E8M0 scale."""

    name: str
    element: Element

    @property
    def data_bytes_per_block(self) -> int:
        return BLOCK * self.element.bits // 8


MX_FORMATS = {f.name: f for f in (
    MXFormat("mxfp8_e4m3", E4M3), MXFormat("mxfp8_e5m2", E5M2),
    MXFormat("mxfp6_e2m3", E2M3), MXFormat("mxfp6_e3m2", E3M2),
    MXFormat("mxfp4", E2M1))}


def mx_format(name: str) -> MXFormat:
    try:
        return MX_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown format {name!r}; expected one of {sorted(MX_FORMATS)}") from None


# -- element codes -------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _decode_table(el: Element) -> np.ndarray:
    """The float64 value of every code."""
    out = np.empty(1 << el.bits, dtype=np.float64)
    top = (1 << el.ebits) - 1
    for code in range(1 << el.bits):
        sign = -1.0 if code >> (el.bits - 1) else 1.0
        e = (code >> el.mbits) & top
        m = code & ((1 << el.mbits) - 1)
        if el.nan == "ieee" and e == top:
            out[code] = sign * np.inf if m == 0 else np.nan
        elif el.nan == "all_ones" and e == top and m == (1 << el.mbits) - 1:
            out[code] = np.nan
        elif e == 0:
            out[code] = sign * m / (1 << el.mbits) * 2.0 ** (1 - el.bias)
        else:
            out[code] = sign * (1 + m / (1 << el.mbits)) * 2.0 ** (e - el.bias)
    out.setflags(write=False)
    return out


def decode(codes, el: Element) -> np.ndarray:
    """Element codes (any integer array) -> float64 values."""
    return _decode_table(el)[np.asarray(codes, dtype=np.int64)]


def encode(x, el: Element, saturate: bool = True) -> np.ndarray:
    """float64 values -> element codes (uint8), round to nearest, ties to even.

    saturate: a finite value beyond the largest finite one becomes ±max (the OCP MX conversion);
    otherwise it becomes ±inf (e5m2) or NaN (e4m3fn) once it rounds past max. ±inf saturates to
    ±max too, unless saturate is False and the type has inf. NaN becomes the type's NaN; a type
    without NaN (FP6, FP4) refuses it.

    Arithmetic, not a table search (oracles quantize tensors of 10^8 elements): within a binade
    the values are multiples of 2^(e - mbits), so rint (ties to even) of x over that spacing is
    the nearest value with an even mantissa on a tie; below the normal range the spacing is the
    subnormal one."""
    x = np.asarray(x, dtype=np.float64)
    half = 1 << (el.bits - 1)
    top = el.max
    nan = np.isnan(x)
    if el.nan == "none" and nan.any():
        raise ValueError(f"{el.name} has no NaN: cannot encode NaN")
    mag = np.abs(np.where(nan, 0.0, x))
    emin = 1 - el.bias
    _, exp = np.frexp(mag)  # mag = f * 2^exp, f in [0.5, 1): floor(log2 mag) = exp - 1
    spacing = np.ldexp(1.0, np.maximum(exp - 1, emin) - el.mbits)
    value = np.rint(mag / np.where(np.isinf(mag), 1.0, spacing)) * spacing
    over = value > top
    value = np.minimum(value, top)
    _, vexp = np.frexp(value)
    e = vexp - 1
    normal = (value > 0) & (e >= emin)
    mant = np.where(normal, value / np.ldexp(1.0, np.where(normal, e, 0) - el.mbits) - (1 << el.mbits),
                    value / np.ldexp(1.0, emin - el.mbits))
    code = (np.where(normal, (e + el.bias) << el.mbits, 0) + mant.astype(np.int64)).astype(np.int64)
    if not saturate:
        if el.nan == "ieee":
            code = np.where(over, ((1 << el.ebits) - 1) << el.mbits, code)
        elif el.nan == "all_ones":
            code = np.where(over, half - 1, code)
    code = code | np.where(np.signbit(x), half, 0)
    if el.nan != "none":  # exponent and mantissa all ones: NaN in both FP8 types
        code = np.where(nan, half - 1, code)
    return code.astype(np.uint8)


def round_to(x, el: Element, saturate: bool = True) -> np.ndarray:
    """x rounded to the nearest value of the element type, as float64."""
    return decode(encode(x, el, saturate), el)


# -- E8M0 scales ---------------------------------------------------------------------------------

def e8m0_decode(codes) -> np.ndarray:
    c = np.asarray(codes, dtype=np.int64)
    return np.where(c == E8M0_NAN, np.nan, np.ldexp(1.0, c - E8M0_BIAS))


def e8m0_encode_exponent(exp) -> np.ndarray:
    """A power-of-two exponent -> its E8M0 code, clamped to the representable 2^-127..2^127."""
    return (np.clip(np.asarray(exp, dtype=np.int64), -127, 127) + E8M0_BIAS).astype(np.uint8)


# -- MX blocks -----------------------------------------------------------------------------------

def quantize_mx(x, fmt: str | MXFormat) -> tuple[np.ndarray, np.ndarray]:
    """float array [..., K] (K a multiple of 32) -> (element codes uint8 [..., K], scale codes
    uint8 [..., K / 32]), OCP MX v1.0 section 6.3: the shared exponent is
    floor(log2(max |x| of the block)) - emax of the element type, the elements are x / 2^shared
    rounded to nearest even with saturation. A block of zeros gets the smallest scale; a block
    holding NaN gets the NaN scale (its elements are then meaningless zeros)."""
    f = mx_format(fmt) if isinstance(fmt, str) else fmt
    x = np.asarray(x, dtype=np.float64)
    k = x.shape[-1]
    if k % BLOCK:
        raise ValueError(f"the last dimension ({k}) is not a multiple of the MX block ({BLOCK})")
    blocks = x.reshape(*x.shape[:-1], k // BLOCK, BLOCK)
    nan = np.isnan(blocks)
    has_nan = nan.any(axis=-1)
    clean = np.where(nan, 0.0, blocks)
    amax = np.abs(clean).max(axis=-1, initial=0.0)
    with np.errstate(divide="ignore"):
        exp = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - f.element.emax
    # an inf block gets the largest scale and saturates; a zero block the smallest
    shared = np.clip(np.where(amax > 0, exp, -127), -127, 127).astype(np.int64)
    scale = e8m0_encode_exponent(shared)
    scaled = clean / np.ldexp(1.0, shared)[..., None]
    codes = encode(scaled, f.element, saturate=True)
    scale = np.where(has_nan, np.uint8(E8M0_NAN), scale).astype(np.uint8)
    return codes.reshape(x.shape), scale


def dequantize_mx(codes, scales, fmt: str | MXFormat) -> np.ndarray:
    """(element codes [..., K], scale codes [..., K / 32]) -> float64 [..., K]."""
    f = mx_format(fmt) if isinstance(fmt, str) else fmt
    codes = np.asarray(codes)
    k = codes.shape[-1]
    vals = decode(codes, f.element).reshape(*codes.shape[:-1], k // BLOCK, BLOCK)
    return (vals * e8m0_decode(scales)[..., None]).reshape(codes.shape)


# -- packing ---------------------------------------------------------------------------------------

def pack(codes, fmt: str | MXFormat) -> np.ndarray:
    """Element codes uint8 [..., K] -> the packed data bytes [..., K * bits / 8] (module docstring)."""
    f = mx_format(fmt) if isinstance(fmt, str) else fmt
    c = np.asarray(codes, dtype=np.uint32)
    bits = f.element.bits
    if bits == 8:
        return c.astype(np.uint8)
    if bits == 4:
        return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)
    if bits == 6:
        g = c.reshape(*c.shape[:-1], -1, 4)
        word = g[..., 0] | (g[..., 1] << 6) | (g[..., 2] << 12) | (g[..., 3] << 18)
        out = np.stack([word & 0xFF, (word >> 8) & 0xFF, (word >> 16) & 0xFF], axis=-1)
        return out.reshape(*c.shape[:-1], -1).astype(np.uint8)
    raise ValueError(f"no packing for {bits}-bit elements")


def unpack(data, fmt: str | MXFormat) -> np.ndarray:
    """The inverse of pack: packed bytes -> element codes uint8 [..., K]."""
    f = mx_format(fmt) if isinstance(fmt, str) else fmt
    d = np.asarray(data, dtype=np.uint32)
    bits = f.element.bits
    if bits == 8:
        return d.astype(np.uint8)
    if bits == 4:
        out = np.stack([d & 0xF, d >> 4], axis=-1)
        return out.reshape(*d.shape[:-1], -1).astype(np.uint8)
    if bits == 6:
        g = d.reshape(*d.shape[:-1], -1, 3)
        word = g[..., 0] | (g[..., 1] << 8) | (g[..., 2] << 16)
        out = np.stack([(word >> (6 * i)) & 0x3F for i in range(4)], axis=-1)
        return out.reshape(*d.shape[:-1], -1).astype(np.uint8)
    raise ValueError(f"no packing for {bits}-bit elements")


def to_mx(x, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """float array [..., K] -> (packed data, scales): what a `format:` tensor's buffers hold."""
    codes, scales = quantize_mx(x, fmt)
    return pack(codes, fmt), scales


def from_mx(data, scales, fmt: str) -> np.ndarray:
    """(packed data, scales) -> float64 [..., K]."""
    return dequantize_mx(unpack(data, fmt), scales, fmt)


# -- the spec language's view --------------------------------------------------------------------

def storage(fmt: str, last: str | int) -> dict[str, str | int]:
    """The last dimension of each storage buffer of a `format:` tensor whose logical last
    dimension is `last` (a shape symbol, expression or number): {"data": ..., "scale": ...}.
    Every case must make `last` a multiple of BLOCK (regen/spec.py checks)."""
    f = mx_format(fmt)
    bits = f.element.bits
    if isinstance(last, int):
        return {"data": last * bits // 8, "scale": last // BLOCK}
    inner = last if last.isidentifier() else f"({last})"
    data = inner if bits == 8 else f"{inner} * {bits} // 8"
    return {"data": data, "scale": f"{inner} // {BLOCK}"}


def describe(fmt: str) -> str:
    """One paragraph a kernel writer needs: element type, packing, scales (the prompt shows it)."""
    f = mx_format(fmt)
    el = f.element
    packing = {8: "one code per byte",
               6: "4 codes in 3 bytes: code i of a group of 4 is bits 6i..6i+5 of the little-endian "
                  "24-bit word b0 | b1 << 8 | b2 << 16",
               4: "2 codes per byte, element 2i in the low nibble and 2i+1 in the high nibble"}
    nan = {"none": "no inf or NaN codes", "all_ones": "S.1111.111 is NaN, no inf",
           "ieee": "exponent all ones is inf (mantissa 0) or NaN"}[el.nan]
    return (f"{fmt}: OCP MX, blocks of {BLOCK} consecutive elements along the last dimension. "
            f"Elements are FP{el.bits} {el.name} (1 sign, {el.ebits} exponent, {el.mbits} mantissa "
            f"bits, bias {el.bias}, subnormals, {nan}, largest {el.max:g}), packed {packing[el.bits]}. "
            f"Each block's scale is one E8M0 byte s (the value 2^(s - 127), s = 255 is NaN); "
            f"element value = scale * decoded element.")
