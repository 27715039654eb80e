"""Compile stage: one module per language. A toolchain turns source into a binary plus a resource
report and (where a disassembler exists) the disassembly that instruction checks read.

Interface (each module exposes a `Toolchain` class):
    name: str                                  # "cxx", "nvrtc", "hip"
    binary_suffix: str                         # ".so", ".cubin", ".hsaco"
    def problem(self) -> str | None            # None when usable here, else why not and how to fix
    def identity(self, target) -> dict         # compile-key part: tool, version, flags, arch
    def compile(self, source: str, target) -> CompileResult
Compile errors are results (ok=False, log kept for the repair loop), never exceptions.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass
class CompileResult:
    ok: bool
    binary: bytes = b""
    log: str = ""
    # kernel symbol -> {"registers": int, "spill_bytes": int, "shared_bytes": int, ...}
    resources: dict[str, dict] = field(default_factory=dict)
    disassembly: str | None = None
    seconds: float = 0.0


_MODULES = {"cxx": "cxx", "nvrtc": "nvrtc", "hip": "hip"}


def get_toolchain(target):
    """The toolchain object for a target (lazy import: a CPU-only plan never loads NVRTC)."""
    module = importlib.import_module(f"regen.toolchains.{_MODULES[target.toolchain.name]}")
    return module.Toolchain()
