"""Run committed host (cpu) implementations the way the judge does: compiled by regen's cxx
toolchain with the cpu target's flags, loaded by regen/runtimes/cpu.py in a process of their own
(never into the test's), called through the launch recipe on NaN-poisoned outputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from . import library


def skip_unless_available() -> None:
    if shutil.which("g++") is None or shutil.which("nm") is None:
        pytest.skip("g++ and nm (the host column's toolchain) are not installed")


def build(kernel: str, folder: Path) -> Path:
    """The committed kernel@cpu compiled as `regen verify -t cpu` compiles it; fails the test with
    the compiler's log (or the toolchain's rejection) if it does not build."""
    from regen.compile import compile_source
    source, _ = library.committed(kernel, "cpu")
    compiled = compile_source(source, library.target("cpu"))
    assert compiled.result.ok, compiled.result.log[-4000:]
    path = folder / f"{kernel}.so"
    path.write_bytes(compiled.result.binary)
    return path


class Runtimes(dict):
    """kernel -> a host Runtime running its committed implementation (built on first use); close()
    ends every artifact process."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self._tmp = tmp_path_factory

    def __missing__(self, kernel):
        from regen.runtimes.cpu import Runtime
        self[kernel] = Runtime(str(build(kernel, self._tmp.mktemp(kernel))))
        return self[kernel]

    def close(self):
        for runtime in self.values():
            runtime.close()


def run(runtime, kernel: str, case, inputs: dict) -> dict:
    """The committed cpu recipe's calls for one case; returns the outputs. A write the artifact's
    process makes after its reply (background work) fails the test."""
    launches, recipe, _ = library.bound(kernel, "cpu", case)
    bufs = {**inputs, **library.poisoned_buffers(kernel, case, recipe)}
    runtime.launch(launches, bufs)
    runtime.synchronize()
    assert runtime.late_writes() == [], "the artifact wrote after its reply"
    return {t.name: bufs[t.name] for t in library.spec(kernel).signature.outputs}
