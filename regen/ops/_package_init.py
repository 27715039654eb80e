"""The __init__.py of a package written by `regen export` (copied there; never imported inside
regen itself). It needs torch, and cuda-bindings for CUDA columns; not regen, YAML, pydantic or
any oracle.

manifest.json carries, per exported (kernel, column): the op's signature, the launch recipe, the
binary's file and the verification record's summary with the digest of the binary it verified.
Import refuses the whole package when any binary's bytes do not have that digest. There is no
torch fallback here (the oracle is not shipped): a device no exported column matches, or a shape
no recipe launch applies to, is a clear RuntimeError.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

from . import _autograd
from ._dispatch import KernelOp, Resolution, python_function, register
from ._launch import CpuLibrary, CudaLibrary
from ._signature import Signature

_HERE = Path(__file__).resolve().parent
MANIFEST = json.loads((_HERE / "manifest.json").read_text())
NAMESPACE = MANIFEST["namespace"]


def _check_binaries() -> None:
    for col in MANIFEST["columns"]:
        path = _HERE / col["binary"]
        want = col["record"]["binary"]
        try:
            got = hashlib.sha256(path.read_bytes()).hexdigest()
        except FileNotFoundError:
            raise ImportError(f"{__name__}: {col['binary']} is missing (the verification record "
                              f"of {col['column']} names it)") from None
        if got != want:
            raise ImportError(f"{__name__}: {col['binary']} has digest {got[:16]}, but the "
                              f"verification record of {col['column']} verified {want[:16]}; "
                              "refusing to load a binary that is not the verified one")


_check_binaries()


class _Resolver:
    def __init__(self):
        self._libraries: dict = {}
        self._resolved: dict = {}

    def resolve(self, kernel, device_type, index) -> Resolution:
        key = (kernel, device_type, index)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(kernel, device_type, index)
        return self._resolved[key]

    def _resolve(self, kernel, device_type, index) -> Resolution:
        cols = [c for c in MANIFEST["columns"] if c["kernel"] == kernel and c["device"] == device_type]
        if device_type == "cuda":
            import torch

            name = torch.cuda.get_device_name(index)
            sm = "".join(map(str, torch.cuda.get_device_capability(index)))
            here = f"{name} (sm_{sm})"
            cols = [c for c in cols if any(m.lower() in name.lower() for m in c["match"])
                    and c["arch"].removeprefix("sm_").rstrip("af") == sm]
        else:
            here = platform.machine()
            cols = [c for c in cols if not c["match"] or any(m in here for m in c["match"])]
        if not cols:
            have = ", ".join(c["column"] for c in MANIFEST["columns"] if c["kernel"] == kernel)
            return Resolution(reason=f"no exported column for {here} (exported: {have or 'none'})")
        col = cols[0]
        if col["binary"] not in self._libraries:
            path = _HERE / col["binary"]
            self._libraries[col["binary"]] = (CudaLibrary(path.read_bytes(), col["binary"])
                                              if device_type == "cuda" else CpuLibrary(str(path)))
        return Resolution(column=col["column"], library=self._libraries[col["binary"]],
                          recipe=col["recipe"])

    def fallback(self, kernel):
        return None


_resolver = _Resolver()
_ops = {d["name"]: KernelOp(Signature(d, __name__), _resolver, NAMESPACE, __name__)
        for d in MANIFEST["ops"]}
_library = register(NAMESPACE, list(_ops.values()))
_differentiable = _autograd.register(NAMESPACE, _ops, _library, __name__)
for _name, _op in _ops.items():
    globals()[_name] = python_function(_op, __name__, MANIFEST["summaries"].get(_name, ""))


def columns() -> list[dict]:
    """What this package carries: per (kernel, column), where and when it was verified."""
    return [{"column": c["column"], "device": c["device"], **c["record"]}
            for c in MANIFEST["columns"]]


def kernels() -> list[str]:
    """The kernels this package has ops for."""
    return sorted(_ops)


def patch(model) -> dict[str, int]:
    """Swap a model's RMSNorm, RoPE, SwiGLU, softmax and cross-entropy modules for ones calling
    this package's ops (as regen.patch does with regen.ops); kinds it has no kernel for stay."""
    from ._patch import patch as _patch

    return _patch(model, __name__)


def differentiable() -> list[str]:
    """The ops with a backward formula: those whose backward kernel was exported with them."""
    return sorted(_differentiable)


def runs(kernel: str, *args) -> str | None:
    """The column a call with these arguments runs."""
    return _ops[kernel].plan_for(*args).column
