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
