"""Host toolchain: the system C++ compiler builds the artifact into a shared library."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from ..judge.hostcode import compile_time_problems, symbols as _symbols

from . import CompileResult


@lru_cache(maxsize=4)
def _compiler_version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0].strip() if out.stdout else "unknown"


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


class Toolchain:
    name = "cxx"
    binary_suffix = ".so"

    def problem(self) -> str | None:
        if _compiler() is None:
            return "no C++ compiler found: install g++ (apt-get install g++) or set CXX"
        return None

    def identity(self, target) -> dict:
        cxx = _compiler() or "c++"
        return {"tool": "cxx", "compiler": _compiler_version(cxx), "arch": target.arch,
                "flags": list(target.toolchain.flags)}

    def compile(self, source: str, target) -> CompileResult:
        cxx = _compiler()
        if cxx is None:
            return CompileResult(ok=False, log=self.problem() or "")
        with tempfile.TemporaryDirectory(prefix="regen-cxx-") as tmp:
            src, out = Path(tmp) / "kernel.cpp", Path(tmp) / "kernel.so"
            src.write_text(source)
            # -ffile-prefix-map keeps the temporary path out of the binary, so builds are reproducible
            cmd = [cxx, *target.toolchain.flags, f"-ffile-prefix-map={tmp}=.",
                   "-Wl,--build-id=none", str(src), "-o", str(out)]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            seconds = time.perf_counter() - t0
            log = (proc.stdout + proc.stderr).replace(tmp + "/", "")
            if proc.returncode != 0:
                return CompileResult(ok=False, log=log, seconds=seconds)
            binary = out.read_bytes()
            exports, imports = _symbols(out)
            # what a host kernel may not import: regen/judge/hostcode.py (checked again at load)
            bad = compile_time_problems(imports)
            if bad:
                return CompileResult(ok=False, seconds=seconds, log=log + (
                    f"\nrejected: the artifact imports {', '.join(bad)}; a host kernel may not "
                    "load code, start threads of its own (use OpenMP) or spawn processes"))
            resources = {name: {"text_bytes": size} for name, size in exports.items()}
            return CompileResult(ok=True, binary=binary, log=log, resources=resources,
                                 disassembly=_disassemble(out), seconds=seconds)


def _disassemble(path: Path) -> str | None:
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True,
                         text=True)
    return out.stdout if out.returncode == 0 else None


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
