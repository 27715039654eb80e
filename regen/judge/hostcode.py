"""Checks of host (C++) artifacts' machine code: what a host kernel may not import or contain.

Two moments: at compile time (regen/toolchains/cxx.py refuses the build) and again in the child,
right before the shared object is loaded, because a cached binary may predate a change of these
lists (the `native-code` guard). A host kernel must compute, not call a framework, start threads of
its own, spawn processes or load other code (docs/reward-hacks.md 5, 7 and 9). OpenMP is allowed.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

# refused at compile time (the build fails with the artifact's log)
FORBIDDEN_SYMBOLS = ("dlopen", "dlsym", "dlmopen", "fork", "vfork", "execv", "execve", "execvp",
                     "system", "popen", "posix_spawn", "pthread_create", "clone", "ptrace",
                     "mprotect", "signal", "sigaction", "std::thread")

# refused at load, beyond FORBIDDEN_SYMBOLS: no file or process access, no raw system calls, no
# executable memory of its own, no Python C API, no walking the dynamic linker's structures
FORBIDDEN_IMPORTS = (
    "syscall", "open", "open64", "openat", "openat64", "creat", "creat64", "fopen", "fopen64",
    "freopen", "fdopen", "write", "pwrite", "pwrite64", "writev", "mkdir", "mkdirat", "rename",
    "renameat", "unlink", "unlinkat", "remove", "rmdir", "symlink", "link", "truncate", "ftruncate",
    "socket", "connect", "kill", "tgkill", "dup2", "dup3", "mmap", "mmap64", "mremap", "prctl",
    "thrd_create", "clone3", "__clone", "execl", "execle", "execlp", "execvpe", "fexecve",
    "posix_spawnp", "daemon", "process_vm_writev", "process_vm_readv", "pkey_mprotect",
    "_r_debug", "_rtld_global", "_rtld_global_ro", "__libc_dlopen_mode", "__libc_dlsym",
    "environ", "__environ", "program_invocation_name",
)
FORBIDDEN_PREFIXES = ("Py", "_Py", "dl", "_dl_", "pthread_create", "posix_spawn", "exec")
_RAW_SYSCALL = re.compile(r"\t(syscall|sysenter|int\s+\$0x80)\b")


def symbols(path: Path) -> tuple[dict[str, int], list[str]]:
    """Exported functions (name -> size) and undefined imports of a shared object (nm -D -C)."""
    exports: dict[str, int] = {}
    imports: list[str] = []
    nm = shutil.which("nm")
    if nm is None:
        return exports, imports
    out = subprocess.run([nm, "-D", "-S", "-C", "--defined-only", str(path)],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[2] in ("T", "t"):
            exports[parts[3]] = int(parts[1], 16)
    out = subprocess.run([nm, "-D", "-C", "--undefined-only", str(path)],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts:
            imports.append(parts[-1])
    return exports, imports


def compile_time_problems(imports: list[str]) -> list[str]:
    """The imports the compile step refuses (sorted)."""
    return sorted({s for s in imports for f in FORBIDDEN_SYMBOLS
                   if s == f or s.startswith(f + "@") or f in s and f.startswith("std::")})


def _forbidden_at_load(name: str) -> bool:
    return name in FORBIDDEN_IMPORTS or name.startswith(FORBIDDEN_PREFIXES) or any(
        name == f or (f.startswith("std::") and f in name) for f in FORBIDDEN_SYMBOLS)


def native_problems(path: str) -> tuple[list[str], list[str]]:
    """Why a host shared object must not be loaded (empty when it may), and the symbols it
    imports."""
    problems = segment_problems(Path(path).read_bytes())
    _, imports = symbols(Path(path))
    bad = {sym.split("@")[0] for sym in imports if _forbidden_at_load(sym.split("@")[0])}
    if bad:
        problems.append(f"imports {', '.join(sorted(bad))}")
    objdump = shutil.which("objdump")
    if objdump:
        out = subprocess.run([objdump, "-d", "--no-show-raw-insn", path], capture_output=True,
                             text=True).stdout
        calls = sorted({m.group(1) for m in _RAW_SYSCALL.finditer(out)})
        if calls:
            problems.append(f"contains raw system call instructions ({', '.join(calls)})")
    return problems, [i.split("@")[0] for i in imports]


def segment_problems(data: bytes) -> list[str]:
    """ELF64 program headers: no segment both writable and executable, no executable stack."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return ["not an ELF64 shared object"]
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    out = []
    for i in range(phnum):
        p_type, p_flags = struct.unpack_from("<II", data, phoff + i * phentsize)
        if p_type == 1 and p_flags & 0x3 == 0x3:        # PT_LOAD, PF_W | PF_X
            out.append("has a writable and executable segment")
        if p_type == 0x6474E551 and p_flags & 0x1:      # PT_GNU_STACK, PF_X
            out.append("asks for an executable stack")
    return out


def uses_openmp(imports: list[str]) -> bool:
    return any(i.startswith(("GOMP_", "omp_")) for i in imports)


def omp_threads() -> int:
    """OpenMP's default team size here: OMP_NUM_THREADS, else the CPUs this process may use."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        return len(os.sched_getaffinity(0))
