"""The CUDA driver API calls both CUDA launchers make: the judge's runtime (regen/runtimes/cuda.py,
in a child process) and regen.ops' in-process launcher (regen/ops/launch.py). Checked calls that
name the CUDA error, and what the driver says about a kernel's parameters, live here once.

Standalone: cuda.bindings only, imported on first use, so `regen export` ships this file in a
package that has no regen.
"""

from __future__ import annotations


def _driver():
    from cuda.bindings import driver

    return driver


def error_name(result) -> str:
    """CUDA_ERROR_... for a CUresult (the enum's own name when the driver cannot be asked)."""
    try:
        driver = _driver()
        err, name = driver.cuGetErrorName(result)
        if err == driver.CUresult.CUDA_SUCCESS and name:
            return name.decode()
    except Exception:  # noqa: BLE001 - no driver library: fall back to the enum name
        pass
    return getattr(result, "name", str(result))


def check(result, what: str) -> None:
    """Raise RuntimeError('<what>: CUDA_ERROR_...') unless result is CUDA_SUCCESS."""
    if result != _driver().CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {error_name(result)}")


def call(what: str, fn, *args):
    """fn(*args) for a cuda.bindings function returning (CUresult, value...): the value(s),
    or RuntimeError naming `what` and the error."""
    out = fn(*args)
    check(out[0], what)
    return out[1] if len(out) == 2 else out[1:]


def param_sizes(fn) -> list[int] | None:
    """Sizes in bytes of a kernel's parameters (driver >= 12.4), or None when the driver cannot
    say: what a recipe's argument kinds are checked against before the first launch."""
    driver = _driver()
    if not hasattr(driver, "cuFuncGetParamInfo"):
        return None
    sizes = []
    while True:
        err, _offset, size = driver.cuFuncGetParamInfo(fn, len(sizes))
        if err == driver.CUresult.CUDA_ERROR_INVALID_VALUE:
            return sizes
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        sizes.append(size)


def encode_tensor_map(args: dict) -> bytes:
    """The 128 bytes of a CUtensorMap from cuTensorMapEncodeTiled, for the plain arguments of
    regen.tensormap.BoundTensorMap.encode_args (element type by name, byte strides, swizzle and
    L2 promotion in bytes). A refusal raises RuntimeError with the driver's error and the map's
    figures. Needs a CUDA context current on the calling thread's device."""
    import ctypes

    driver = _driver()
    swizzle = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[args["swizzle"]]
    promotion = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[args["l2_promotion"]]
    rank = args["rank"]
    out = driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{args['element_type']}"),
        rank, args["address"],
        [driver.cuuint64_t(d) for d in args["dims"]],
        [driver.cuuint64_t(s) for s in args["strides"]],
        [driver.cuuint32_t(b) for b in args["box"]],
        [driver.cuuint32_t(e) for e in args["element_strides"]],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}"),
        getattr(driver.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{promotion}"),
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
        if args["oob_nan"] else driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    check(out[0], f"cuTensorMapEncodeTiled({args['element_type']}, dims {args['dims']}, byte "
                  f"strides {args['strides']}, box {args['box']}, swizzle {swizzle}, address "
                  f"{args['address']:#x})")
    return ctypes.string_at(out[1].getPtr(), 128)


class TensorMapCache:
    """Encoded maps memoised on everything they depend on (regen.tensormap.BoundTensorMap.key:
    the buffer's address included), so a launch over the same buffer reuses its map and a launch
    over any other buffer encodes its own. Bounded: the oldest half goes when it fills."""

    def __init__(self, limit: int = 4096):
        self._maps: dict[tuple, bytes] = {}
        self._limit = limit

    def get(self, bound, address: int) -> bytes:
        key = bound.key(address)
        encoded = self._maps.get(key)
        if encoded is None:
            if len(self._maps) >= self._limit:
                for k in list(self._maps)[: self._limit // 2]:
                    self._maps.pop(k, None)  # another thread may have dropped it first
            encoded = self._maps[key] = encode_tensor_map(bound.encode_args(address))
        return encoded
