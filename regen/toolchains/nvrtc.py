"""CUDA compile stage: NVRTC (through cuda-bindings) to a cubin, pip wheels only, no GPU needed.

Headers come from the nvidia-cuda-runtime and nvidia-cuda-cccl wheels; their versions are part of
the toolchain identity because they change the binary. `--ptxas-options=-v` makes the NVRTC log
report registers, spills, stack and shared memory per kernel, parsed into CompileResult.resources.
SASS comes from cuobjdump (nvidia-cuda-cuobjdump, which needs nvdisasm from nvidia-cuda-nvdisasm);
without them the disassembly is None and instruction checks cannot run, but compiling still works.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import CompileResult

INSTALL_HINT = ("pip install 'cuda-bindings>=13,<14' nvidia-cuda-nvrtc nvidia-cuda-runtime "
                "nvidia-cuda-cccl (or: pip install -e '.[cuda]'); for SASS also "
                "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
# Always passed; the log they produce is what the resource report is parsed from.
FORCED_FLAGS = ("--ptxas-options=-v",)
SOURCE_NAME = "kernel.cu"

# (role, wheel, a file that marks the include directory, relative to that directory)
HEADER_WHEELS = (
    ("cuda-runtime", "nvidia-cuda-runtime", "cuda_runtime.h"),
    ("cccl", "nvidia-cuda-cccl", "cuda/std/version"),
    ("crt", "nvidia-cuda-crt", "crt/mma.h"),  # optional: makes <mma.h> (WMMA) work
)
REQUIRED_HEADERS = ("cuda-runtime", "cccl")
_VERSION_MACROS = {"cuda-runtime": ("cuda_runtime_api.h", "CUDART_VERSION"),
                   "cccl": ("cuda/std/__cccl/version.h", "CCCL_VERSION")}


def _wheel_include_dir(wheel: str, marker: str) -> Path | None:
    try:
        dist = metadata.distribution(wheel)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        path = str(f).replace("\\", "/")
        if path.endswith("/include/" + marker) or path.endswith("/include/cccl/" + marker):
            full = Path(dist.locate_file(f))
            if full.exists():
                return full.parents[len(Path(marker).parts) - 1]
    return None


def _macro_version(directory: Path, role: str) -> str:
    rel, macro = _VERSION_MACROS.get(role, ("", ""))
    try:
        text = (directory / rel).read_text(errors="replace")
    except OSError:
        return "unknown"
    m = re.search(rf"#\s*define\s+{macro}\s+(\d+)", text)
    return f"{macro} {m.group(1)}" if m else "unknown"


@functools.lru_cache(maxsize=1)
def header_dirs() -> tuple[tuple[str, str, str], ...]:
    """(role, include directory, version) for each header set found: pip wheels first, then a
    system CUDA toolkit located by cuda.pathfinder (versioned by its header macros)."""
    found = []
    for role, wheel, marker in HEADER_WHEELS:
        directory = _wheel_include_dir(wheel, marker)
        if directory is not None:
            found.append((role, str(directory), f"{wheel}=={metadata.version(wheel)}"))
            continue
        if role not in REQUIRED_HEADERS:
            continue
        directory = _toolkit_include_dir(role, marker)
        if directory is not None:
            found.append((role, str(directory), _macro_version(directory, role)))
    return tuple(found)


def _toolkit_include_dir(role: str, marker: str) -> Path | None:
    """A CUDA toolkit's include directory: as cuda.pathfinder finds it (CUDA_HOME, conda), else
    next to nvcc on PATH, else /usr/local/cuda."""
    candidates = []
    try:
        from cuda import pathfinder
        located = pathfinder.locate_nvidia_header_directory(
            {"cuda-runtime": "cudart", "cccl": "cccl"}[role])
        if located is not None and located.abs_path:
            candidates.append(Path(located.abs_path))
    except Exception:  # noqa: BLE001 - any failure means "not found this way"
        pass
    nvcc = shutil.which("nvcc")
    for root in ([Path(nvcc).resolve().parent.parent] if nvcc else []) + [Path("/usr/local/cuda")]:
        candidates += [root / "include", root / "include" / "cccl"]
    return next((c for c in candidates if (c / marker).is_file()), None)


def _nvrtc():
    from cuda.bindings import nvrtc
    return nvrtc


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> dict:
    """NVRTC's own version plus the wheel (or file) the library was loaded from."""
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    library = "unknown"
    try:
        from cuda import pathfinder
        path = os.path.realpath(pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path)
        library = os.path.basename(path)
        try:
            dist = metadata.distribution("nvidia-cuda-nvrtc")
            if any(os.path.realpath(dist.locate_file(f)) == path for f in dist.files or ()):
                library = f"nvidia-cuda-nvrtc=={dist.version}"
        except metadata.PackageNotFoundError:
            pass
    except Exception:  # noqa: BLE001 - the version alone still identifies the compiler
        pass
    return {"version": f"{major}.{minor}", "library": library}


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {err.name}")


def find_tool(name: str) -> str | None:
    """Path of a CUDA binary utility (cuobjdump, nvdisasm) from its wheel or a toolkit, or None."""
    try:
        from cuda import pathfinder
        found = pathfinder.find_nvidia_binary_utility(name)
    except Exception:  # noqa: BLE001 - not found this way
        found = None
    return found or shutil.which(name)


# --- the ptxas -v log -------------------------------------------------------------------------
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*:\s*Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")
# Advisories such as "(C7519) warpgroup.arrive is injected ..." or "(C7510) Potential Performance
# Loss: wgmma.mma_async instructions are serialized ..." name their function; they may come
# before that function's "Compiling entry function" line.
_ADVISORY = re.compile(r"ptxas (?:info|warning)\s*:\s*(\(C\d+\).*|.*[Ss]pill.*function.*)$")
_FUNCTION_NAMED = re.compile(r"function '([^']+)'")


def parse_ptxas_log(log: str) -> dict[str, dict]:
    """Kernel symbol -> registers, spill/stack/shared/constant bytes from a `ptxas -v` log.

    ptxas prints per entry: "Compiling entry function 'k'", "Function properties for k",
    "N bytes stack frame, N bytes spill stores, N bytes spill loads", "Used N registers, used N
    barriers, N bytes smem, N bytes cmem[0]". Non-entry (device) functions are not reported.
    Advisories naming a kernel (injected warpgroup.arrive, serialized wgmma) go to "advisories"."""
    kernels: dict[str, dict] = {}
    advisories: list[tuple[str | None, str]] = []
    entry = properties_of = None
    for line in log.splitlines():
        if m := _ADVISORY.search(line):
            named = _FUNCTION_NAMED.search(line)
            advisories.append((named.group(1) if named else entry, m.group(1).strip()))
        elif m := _ENTRY.search(line):
            entry = m.group(1)
            kernels[entry] = {"registers": 0, "barriers": 0, "spill_store_bytes": 0,
                              "spill_load_bytes": 0, "spill_bytes": 0, "stack_bytes": 0,
                              "shared_bytes": 0, "constant_bytes": 0}
        elif m := _PROPERTIES.search(line):
            properties_of = m.group(1)
        elif m := _FRAME.search(line):
            if properties_of in kernels:
                stack, stores, loads = (int(g) for g in m.groups())
                kernels[properties_of].update(stack_bytes=stack, spill_store_bytes=stores,
                                              spill_load_bytes=loads, spill_bytes=stores + loads)
        elif (m := _USED.search(line)) and entry in kernels:
            r = kernels[entry]
            r["registers"] = int(m.group(1))
            if b := _BARRIERS.search(line):
                r["barriers"] = int(b.group(1))
            if s := _SMEM.search(line):
                r["shared_bytes"] = int(s.group(1))
            r["constant_bytes"] = sum(int(c) for c in _CMEM.findall(line))
    for name, text in advisories:
        if name in kernels:
            kernels[name].setdefault("advisories", []).append(text)
    return kernels


# --- the toolchain ----------------------------------------------------------------------------
class Toolchain:
    name = "nvrtc"
    binary_suffix = ".cubin"

    def __init__(self, disassemble: bool = True):
        # SASS costs about 0.8 s per compile (nvdisasm start-up); callers that never check
        # instructions can skip it.
        self.disassemble = disassemble

    def problem(self) -> str | None:
        try:
            nvrtc_version()
        except Exception as exc:  # noqa: BLE001 - import or library load failures alike
            return f"NVRTC is not usable here ({type(exc).__name__}: {exc}). {INSTALL_HINT}"
        roles = {role for role, _, _ in header_dirs()}
        missing = [r for r in REQUIRED_HEADERS if r not in roles]
        if missing:
            return (f"CUDA headers not found ({', '.join(missing)}): install the "
                    f"nvidia-cuda-runtime and nvidia-cuda-cccl wheels. {INSTALL_HINT}")
        return None

    def flags(self, target) -> list[str]:
        """The options that change the binary (include paths are machine-local, versioned apart)."""
        return [f"--gpu-architecture={target.arch}", *target.toolchain.flags,
                *[f for f in FORCED_FLAGS if f not in target.toolchain.flags]]

    def identity(self, target) -> dict:
        try:
            version = nvrtc_version()
        except Exception:  # noqa: BLE001 - not installed: compile() reports problem() instead
            version = {"version": "unavailable"}
        return {
            "tool": "nvrtc",
            **version,
            "arch": target.arch,
            "flags": self.flags(target),
            "headers": {role: version for role, _, version in header_dirs()},
        }

    def compile(self, source: str, target) -> CompileResult:
        problem = self.problem()
        if problem:
            return CompileResult(ok=False, log=problem)
        nvrtc = _nvrtc()
        options = [*self.flags(target), *[f"-I{d}" for _, d, _ in header_dirs()]]
        start = time.perf_counter()
        err, program = nvrtc.nvrtcCreateProgram(source.encode(), SOURCE_NAME.encode(), 0, [], [])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return CompileResult(ok=False, log=f"nvrtcCreateProgram failed: {err.name}")
        try:
            encoded = [o.encode() for o in options]
            (result,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
            log = _program_log(nvrtc, program)
            if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                return CompileResult(ok=False, log=log or result.name,
                                     seconds=time.perf_counter() - start)
            err, size = nvrtc.nvrtcGetCUBINSize(program)
            _check(nvrtc, err, "nvrtcGetCUBINSize")
            cubin = bytearray(size)
            (err,) = nvrtc.nvrtcGetCUBIN(program, cubin)
            _check(nvrtc, err, "nvrtcGetCUBIN")
        finally:
            nvrtc.nvrtcDestroyProgram(program)
        seconds = time.perf_counter() - start
        binary = bytes(cubin)
        disassembly, note = disassemble(binary) if self.disassemble else (None, "")
        if note:
            log = f"{log}\n{note}".strip()
        return CompileResult(ok=True, binary=binary, log=log, resources=parse_ptxas_log(log),
                             disassembly=disassembly, seconds=seconds)


def _program_log(nvrtc, program) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(program)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buffer = bytearray(size)
    nvrtc.nvrtcGetProgramLog(program, buffer)
    return bytes(buffer).rstrip(b"\x00").decode(errors="replace").strip()


def disassemble(cubin: bytes) -> tuple[str | None, str]:
    """SASS of a cubin via cuobjdump --dump-sass: (text or None, note on why not when it failed).

    Missing tools give (None, ""): SASS is optional. A tool that is present but fails is noted."""
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if not cuobjdump or not nvdisasm:
        return None, ""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(nvdisasm).parent), env.get("PATH", "")])
    with tempfile.TemporaryDirectory(prefix="regen-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            done = subprocess.run([cuobjdump, "--dump-sass", str(path)], capture_output=True,
                                  text=True, timeout=120, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"regen: no SASS: cuobjdump failed ({exc})"
    if done.returncode != 0:
        return None, f"regen: no SASS: cuobjdump exited {done.returncode}: {done.stderr.strip()}"
    return done.stdout, ""
