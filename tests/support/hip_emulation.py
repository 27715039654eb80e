"""Run HIP sources on the CPU: compile one with clang++ against hip_emulation.h (the CUDA
emulation's fibers and barriers with 64-lane wavefronts) and launch its kernels through the
committed mi350 recipe on guarded, NaN-poisoned buffers, so a kernel's indexing, LDS use,
wavefront reductions and alignment are checked without an AMD GPU."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from . import cuda_emulation

HEADER = Path(__file__).with_name("hip_emulation.h")
CLANGS = ("clang++-22", "clang++")


def _clang() -> str | None:
    return next((path for path in map(shutil.which, CLANGS) if path), None)


def problem() -> str | None:
    """Why the emulation cannot run here (None when it can)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64" or not _clang():
        return "the HIP emulation needs Linux on x86-64 and clang++"
    return None


def skip_unless_available() -> None:
    why = problem()
    if why:
        pytest.skip(why)


def unit(source: str) -> str:
    """The translation unit clang++ compiles: the emulation header, then the HIP source without
    its <hip/...> includes (the header stands in for them), line numbers kept for errors."""
    body = "\n".join("" if line.strip().startswith("#include <hip/") else line
                     for line in source.splitlines())
    return f'#include "{HEADER.name}"\n#line 1 "kernel.hip"\n{body}\n'


def build(source: str, folder: Path) -> Path:
    """Compile a HIP source against the emulation into folder/emu.so; fails the test with the
    compiler's errors if it does not build."""
    folder.mkdir(parents=True, exist_ok=True)
    cpp = folder / "emu.cpp"
    cpp.write_text(unit(source))
    so = folder / "emu.so"
    proc = subprocess.run([_clang(), "-O1", "-std=c++17", "-shared", "-fPIC", "-w",
                           f"-I{HEADER.parent}", str(cpp), "-o", str(so)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return so


def run(lib, kernel: str, case, inputs: dict, repeat: int = 1, target: str = "mi350"):
    """The committed recipe for `target` run as cuda_emulation.run runs an h200 one."""
    return cuda_emulation.run(lib, kernel, case, inputs, target=target, repeat=repeat)
