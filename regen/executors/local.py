"""The local executor: verification on this machine, in the judge's child process."""

from __future__ import annotations

import threading


class LocalExecutor:
    name = "local"

    def __init__(self):
        self.gpu_lock = threading.Lock()   # one device verification at a time: clean timings

    def here(self, target) -> dict | None:
        from .. import hardware

        return hardware.local(target)

    def waiting(self, target) -> str | None:
        return None     # a column without hardware here is "not verified here", as always

    def verify(self, ctx, spec, target, recipe, binary, settings, cases=None, composition=None):
        from ..artifact import LANGUAGES
        from ..judge import run as run_verify

        lock = self.gpu_lock if LANGUAGES[target.language].on_device else _NoLock()
        with lock:
            return run_verify(spec, target, ctx.project.oracle_path(spec.name), recipe, binary,
                              settings, cases=cases, composition=composition)

    def compile(self, source: str, target):
        from ..compile import compile_source

        return compile_source(source, target)

    def jobs(self, requested: int) -> int:
        return max(1, requested)

    def close(self) -> None:
        pass


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
