"""CUDA run stage (child process only): load a cubin into torch's context and launch its recipe.

The driver API (cuda.bindings.driver) loads the module and launches kernels on torch's current
stream, in torch's primary context, so kernels read and write the torch tensors regen allocated.
Every CUresult is checked: a failure raises RuntimeError naming the kernel and the CUDA error, and
an asynchronous fault (CUDA_ERROR_ILLEGAL_ADDRESS) surfaces at synchronize(). Such a fault poisons
the context for the rest of the process, which is why this only ever runs in a child process.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import torch
from cuda.bindings import driver

from ..cudadrv import TensorMapCache, check, param_sizes
from ..cudadrv import call as _call
from ..recipe import BoundArg, BoundLaunch, dtype_name, tensor_pointer
from ..tensormap import PARAM_BYTES, check_buffer
from .events import Stall, Timer

DEFAULT_DYNAMIC_SHARED = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory

_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64,
           "float32": ctypes.c_float, "float64": ctypes.c_double}
_INT_RANGE = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}


def pack_params(launch: BoundLaunch, buffers: dict, maps: TensorMapCache | None = None
                ) -> tuple[ctypes.Array, list]:
    """The void** kernelParams array for one launch, plus the ctypes values it points into
    (which must stay alive until cuLaunchKernel returns). A tensor map is encoded over the buffer
    this launch passes (memoised on its address and figures by `maps`)."""
    values: list = []
    for i, arg in enumerate(launch.args):
        if arg.kind == "tensormap":
            values.append(_tensor_map_value(launch.kernel, i, arg.value, buffers,
                                            maps if maps is not None else TensorMapCache()))
            continue
        values.append(_param_value(launch.kernel, i, arg, buffers))
    pointers = (ctypes.c_void_p * max(len(values), 1))()
    for i, v in enumerate(values):
        pointers[i] = ctypes.addressof(v)
    return pointers, values


def _param_value(kernel: str, index: int, arg: BoundArg, buffers: dict):
    where = f"kernel {kernel!r} argument {index}"
    if arg.kind == "tensor":
        tensor = buffers.get(arg.value)
        if tensor is None:
            raise RuntimeError(f"{where}: no buffer named {arg.value!r}")
        if not isinstance(tensor, torch.Tensor):
            raise RuntimeError(f"{where}: buffer {arg.value!r} is a {type(tensor).__name__}, "
                               f"expected a torch.Tensor")
        return ctypes.c_uint64(tensor_pointer(arg, tensor, where))
    ctype = _CTYPES.get(arg.kind)
    if ctype is None:
        raise RuntimeError(f"{where}: unknown argument kind {arg.kind!r}")
    if arg.kind in _INT_RANGE:
        low, high = _INT_RANGE[arg.kind]
        if not low <= int(arg.value) <= high:
            raise RuntimeError(f"{where}: {arg.value} does not fit in {arg.kind}")
        return ctype(int(arg.value))
    return ctype(float(arg.value))


def _tensor_map_value(kernel: str, index: int, bound, buffers: dict, maps: TensorMapCache):
    """The 128 bytes of a CUtensorMap over the launch's buffer, 64-byte aligned as the driver's
    type is (a ctypes array placed inside a larger one)."""
    tensor = buffers.get(bound.tensor)
    if not isinstance(tensor, torch.Tensor):
        raise RuntimeError(f"kernel {kernel!r} argument {index}: tensor map {bound.name!r} needs "
                           f"the buffer {bound.tensor!r}, which this launch does not have")
    if not tensor.is_contiguous():
        raise RuntimeError(f"kernel {kernel!r} argument {index}: tensor map {bound.name!r}: buffer "
                           f"{bound.tensor!r} is not contiguous")
    try:
        check_buffer(bound, dtype_name(tensor), tensor.numel(), tensor.data_ptr())
    except ValueError as exc:
        raise RuntimeError(f"kernel {kernel!r} argument {index}: {exc}") from None
    encoded = maps.get(bound, tensor.data_ptr())
    room = (ctypes.c_ubyte * (PARAM_BYTES + 64))()
    skew = (-ctypes.addressof(room)) % 64
    value = (ctypes.c_ubyte * PARAM_BYTES).from_buffer(room, skew)
    ctypes.memmove(value, encoded, PARAM_BYTES)
    return value  # from_buffer keeps `room` alive


_PARAM_SIZES = {"tensor": 8, "tensormap": PARAM_BYTES, "int32": 4, "int64": 8, "float32": 4,
                "float64": 8}


class Runtime:
    device = "cuda"

    def __init__(self, binary_path: str, limits: dict | None = None):
        torch.cuda.init()
        self.ordinal = torch.cuda.current_device()
        torch.empty(1, device=f"cuda:{self.ordinal}")  # make sure torch's context exists
        _call("cuInit", driver.cuInit, 0)
        self._device = _call("cuDeviceGet", driver.cuDeviceGet, self.ordinal)
        self._context = _call("cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain,
                              self._device)
        self._make_current()
        self._image = Path(binary_path).read_bytes()
        self._module = _call(f"cuModuleLoadData({binary_path})", driver.cuModuleLoadData,
                             self._image)
        self._functions: dict[str, object] = {}
        self._param_sizes: dict[str, list[int] | None] = {}
        self._dynamic_shared: dict[str, int] = {}
        self._flush_buffer = None
        self._tensor_maps = TensorMapCache()
        self._reset_persisting_l2 = True
        self.stall = Stall()

    def _make_current(self) -> None:
        check(driver.cuCtxSetCurrent(self._context)[0], "cuCtxSetCurrent")
        self._thread = threading.get_ident()

    def function(self, name: str):
        """The CUfunction for an extern "C" symbol of the cubin (cached)."""
        if name not in self._functions:
            err, fn = driver.cuModuleGetFunction(self._module, name.encode())
            if err == driver.CUresult.CUDA_ERROR_NOT_FOUND:
                raise RuntimeError(f"kernel {name!r} is not in the cubin (declare it "
                                   f'extern "C" __global__ with exactly this name)')
            check(err, f"cuModuleGetFunction({name})")
            self._functions[name] = fn
            self._param_sizes[name] = param_sizes(fn)
        return self._functions[name]

    def _check_signature(self, launch: BoundLaunch) -> None:
        sizes = self._param_sizes.get(launch.kernel)
        if sizes is None:
            return
        given = [_PARAM_SIZES[a.kind] for a in launch.args]
        if len(sizes) != len(given):
            raise RuntimeError(f"kernel {launch.kernel!r} takes {len(sizes)} parameters, the "
                               f"recipe passes {len(given)}")
        for i, (want, got) in enumerate(zip(sizes, given)):
            if want != got:
                raise RuntimeError(
                    f"kernel {launch.kernel!r} parameter {i} is {want} bytes, the recipe passes "
                    f"{launch.args[i].kind} ({got} bytes)")

    def _allow_dynamic_shared(self, name: str, fn, nbytes: int) -> None:
        if nbytes <= DEFAULT_DYNAMIC_SHARED or self._dynamic_shared.get(name, 0) >= nbytes:
            return
        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver.cuFuncSetAttribute(fn, attribute, nbytes)[0],
              f"kernel {name!r}: allowing {nbytes} bytes of dynamic shared memory")
        self._dynamic_shared[name] = nbytes

    def launch(self, launches: list[BoundLaunch], buffers: dict) -> None:
        if threading.get_ident() != self._thread:
            self._make_current()
        stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
        for launch in launches:
            fn = self.function(launch.kernel)
            self._check_signature(launch)
            self._allow_dynamic_shared(launch.kernel, fn, launch.shared_mem)
            pointers, keep_alive = pack_params(launch, buffers, self._tensor_maps)
            (err,) = driver.cuLaunchKernel(fn, *launch.grid, *launch.block, launch.shared_mem,
                                           stream, ctypes.addressof(pointers), 0)
            del keep_alive
            check(err, f"launching kernel {launch.kernel!r} grid={launch.grid} "
                       f"block={launch.block} shared_mem={launch.shared_mem}")

    def synchronize(self) -> None:
        """Wait for all work of this context (every stream); asynchronous faults raise here."""
        check(driver.cuCtxSynchronize()[0], "synchronize after kernel launches")

    def timer(self) -> Timer:
        return Timer(self.stall)

    def l2_bytes(self) -> int:
        attribute = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
        return int(_call("cuDeviceGetAttribute", driver.cuDeviceGetAttribute, attribute,
                         self._device))

    def flush_cache(self) -> None:
        """Evict L2 by reading a buffer twice its size; drop any persisting-L2 lines too.

        A read sweep, not a write: writing leaves L2 full of dirty lines whose write-back would
        then steal bandwidth inside the next timed kernel (benchmarks/ceilings.py compares the
        two on a copy). After a read sweep L2 is cold and clean."""
        if self._flush_buffer is None:
            size = max(2 * self.l2_bytes(), 1 << 20) // 8 * 8
            self._flush_buffer = torch.ones(size // 8, dtype=torch.int64, device=f"cuda:{self.ordinal}")
        self._flush_sink = self._flush_buffer.sum()
        if self._reset_persisting_l2:
            # Unsupported on some parts (e.g. MIG slices): then there is nothing to reset.
            self._reset_persisting_l2 = (
                driver.cuCtxResetPersistingL2Cache()[0] == driver.CUresult.CUDA_SUCCESS)

    def fingerprint(self) -> dict:
        return fingerprint()

    def close(self) -> None:
        if self._module is not None:
            driver.cuModuleUnload(self._module)
            self._module = None
            self._functions.clear()


def fingerprint() -> dict:
    """What identifies the hardware and software a verification ran on (no per-board serials)."""
    torch.cuda.init()
    ordinal = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(ordinal)
    _call("cuInit", driver.cuInit, 0)
    cuda_driver = int(_call("cuDriverGetVersion", driver.cuDriverGetVersion))
    device = _call("cuDeviceGet", driver.cuDeviceGet, ordinal)
    l2 = _call("cuDeviceGetAttribute", driver.cuDeviceGetAttribute,
               driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device)
    import cuda.bindings
    return {
        "vendor": "nvidia",
        "device": torch.cuda.get_device_name(ordinal),
        "arch": f"sm_{props.major}{props.minor}",
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": int(l2),
        "driver": _kernel_driver_version(),  # as nvidia-smi reports it (regen.hardware)
        "driver_cuda_version": f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}",
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "cuda_bindings": getattr(cuda.bindings, "__version__", "unknown"),
    }


def _kernel_driver_version() -> str:
    """The NVIDIA kernel driver version (e.g. 580.95.05) from /proc, or 'unknown'."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return "unknown"
    for token in text.split():
        parts = token.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return token
    return "unknown"
