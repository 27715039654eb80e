"""Host runtime (child side): call an artifact's extern "C" functions on CPU tensors via ctypes."""

from __future__ import annotations

import ctypes
import os
import platform
import time

import torch

_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float,
           "float64": ctypes.c_double}


def cpu_fingerprint() -> dict:
    from regen.hardware import host

    return {**host(), "os": f"{platform.system()} {platform.release()}",
            "runtime": {"torch": torch.__version__}}


class Timer:
    def start(self):
        self._t0 = time.perf_counter()

    def stop(self):
        self._t1 = time.perf_counter()

    def seconds(self) -> float:
        return self._t1 - self._t0

    def stall_seconds(self) -> float:
        return 0.0

    def hidden(self) -> bool:
        return True  # host time: there is no launch gap to hide


class Runtime:
    device = "cpu"

    def __init__(self, binary_path: str):
        self.lib = ctypes.CDLL(os.path.abspath(binary_path), mode=ctypes.RTLD_LOCAL)
        self._funcs: dict[str, object] = {}
        self._flush = None

    def _func(self, name: str):
        if name not in self._funcs:
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                raise RuntimeError(f"kernel {name!r} is not exported by the artifact "
                                   "(missing extern \"C\"?)") from None
            fn.restype = None
            self._funcs[name] = fn
        return self._funcs[name]

    def launch(self, launches, buffers) -> None:
        for launch in launches:
            args = []
            for arg in launch.args:
                if arg.kind == "tensor":
                    args.append(ctypes.c_void_p(buffers[arg.value].data_ptr()))
                else:
                    args.append(_CTYPES[arg.kind](arg.value))
            self._func(launch.kernel)(*args)

    def synchronize(self) -> None:
        pass  # host calls are synchronous; background threads are caught by the worker

    def timer(self) -> Timer:
        return Timer()

    def flush_cache(self) -> None:
        if self._flush is None:
            self._flush = torch.empty(64 * 2**20, dtype=torch.uint8)
        self._flush.add_(1)

    def fingerprint(self) -> dict:
        return cpu_fingerprint()
