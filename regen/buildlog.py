"""ninja's trick for no-op builds: if no input changed since the last build on this machine that
succeeded everywhere, say so from the log instead of re-planning.

The signature covers every file the plan reads (specs/, oracles/, targets/, cache/) by path, size
and mtime, the selection, regen's version, the toolchains' identities as installed packages and
binaries, and the hardware present. Any difference, or any node that was not ok, means a real build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from importlib import metadata

from . import __version__

_PACKAGES = ("torch", "cuda-bindings", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-cccl",
             "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm", "hip-python", "pydantic")
_TOOLS = ("g++", "c++", "clang++", "clang-22", "clang-21", "clang-20", "hipcc", "ld.lld-22",
          "llvm-objdump-22", "objdump", "nm", "nvidia-smi", "rocminfo")


def _tree(h, folder: str) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except FileNotFoundError:
        return
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            _tree(h, e.path)
        else:
            st = e.stat(follow_symlinks=False)
            h.update(f"{e.path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())


def signature(project, selection: tuple) -> str:
    h = hashlib.sha256(f"{__version__}\0{selection!r}\0{os.environ.get('CXX', '')}\n".encode())
    for folder in (project.spec_dir, project.oracle_dir, project.target_dir, project.cache_dir):
        _tree(h, str(folder))
    for pkg in _PACKAGES:
        try:
            h.update(f"{pkg}={metadata.version(pkg)}\n".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{pkg}=-\n".encode())
    for tool in _TOOLS:
        path = shutil.which(tool)
        if path:
            st = os.stat(path)
            h.update(f"{tool}:{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _key(project, selection) -> str:
    return f"noop:{project.root}:{selection!r}"


def lookup(project, selection: tuple) -> tuple[str, str | None]:
    """(signature, the saved output of the last all-ok build with this signature, or None)."""
    from .localcache import cache

    sig = signature(project, selection)
    saved = cache().get(_key(project, selection))
    if saved and saved.get("signature") == sig:
        return sig, saved["output"]
    return sig, None


def save(project, selection: tuple, results, output: str) -> None:
    """Remember an all-ok build; the signature is taken after it, since it may write cache/."""
    from .localcache import cache

    if any(r.status not in ("ok", "unsupported") for r in results):
        cache().delete(_key(project, selection))
        return
    cache().set(_key(project, selection), {"signature": signature(project, selection),
                                           "output": output})
