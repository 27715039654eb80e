"""Child side: what is watched around every launch of the artifact.

- Python audit events while a host artifact's code runs in this process (`python-api`): a kernel
  that calls into Python (PyRun_SimpleString, imports, patching classes) raises them, and audit
  hooks cannot be removed;
- the clock, the judge's own functions and the runtime's methods must be the ones captured before
  the artifact was loaded (`harness-integrity`);
- host artifacts: no thread of theirs may outlive a call (`threads`), and no staged buffer may
  change after the call returned (`late-writes`).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from .guards import Rejected


def thread_ids() -> set[int]:
    """Kernel thread ids of this process (every thread, not only those Python knows about)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return {t.native_id for t in threading.enumerate()}


class AuditWatch:
    """Python audit events raised inside a window (a launch of a host artifact in this process)."""

    # raised by regen's own ctypes launch (the first call of a kernel looks its symbol up)
    ALLOWED = {"ctypes.call_function", "ctypes.addressof", "ctypes.dlsym"}

    def __init__(self):
        self.active = False
        self.allowed: set[str] = set()
        self.events: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event, args):
        if self.active and event not in self.ALLOWED and event not in self.allowed:
            if len(self.events) < 20:
                detail = f"({str(args[0])[:60]!r})" if event in ("compile", "exec", "import") \
                    and args else ""
                self.events.append(event + detail)

    def window(self, allowed=()):
        watch = self

        class _Window:
            def __enter__(self):
                watch.events.clear()
                watch.allowed = set(allowed)
                watch.active = True

            def __exit__(self, *exc):
                watch.active = False
                if watch.events and exc[0] is None:
                    raise Rejected("python-api", "the artifact ran Python code during a launch "
                                   f"(audit events: {', '.join(watch.events[:6])})")
                return False

        return _Window()


class _NoWatch:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_AUDIT: AuditWatch | None = None


def install_audit() -> AuditWatch:
    """The child's one audit hook, installed before anything untrusted is loaded."""
    global _AUDIT
    _AUDIT = AuditWatch()
    return _AUDIT


# -- integrity: what a kernel in this process would patch to fake times or results ---------------
def _judge_modules() -> list:
    from . import buffers, compare, degenerate, harness, timing

    return [buffers, compare, degenerate, harness, timing, sys.modules[__name__]]


def _callables(prefix: str, namespace: dict, snap: dict) -> None:
    for name, value in list(namespace.items()):
        if callable(value):
            snap[f"{prefix}.{name}"] = value


def integrity_snapshot(runtime_class) -> dict:
    """The clock functions, every function and method of the child's judge modules, and the
    runtime's (and its Timer's) methods, by name."""
    snap = {f"time.{n}": getattr(time, n) for n in ("perf_counter", "perf_counter_ns",
                                                     "monotonic", "monotonic_ns", "time")}
    for module in _judge_modules():
        short = module.__name__.rsplit(".", 1)[-1]
        _callables(short, vars(module), snap)
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == module.__name__:
                _callables(f"{short}.{value.__name__}", vars(value), snap)
    _callables("Runtime", vars(runtime_class), snap)
    timer = getattr(sys.modules[runtime_class.__module__], "Timer", None)
    if timer is not None:
        _callables("Timer", vars(timer), snap)
    return snap


def integrity_changed(snap: dict, runtime_class) -> list[str]:
    now = integrity_snapshot(runtime_class)
    return sorted(k for k in snap.keys() | now.keys() if snap.get(k) is not now.get(k))


class LaunchWatch:
    """The guards around every launch of one loaded artifact."""

    def __init__(self, runtime_class, host_code: bool, omp_pool: int):
        self.runtime_class, self.host_code, self.omp_pool = runtime_class, host_code, omp_pool
        # host code runs in a process of its own (runtimes/cpu.py) unless a runtime says otherwise:
        # then the audit window has nothing to watch here, and threads are counted in that process
        self.in_process = host_code and getattr(runtime_class, "in_process", True)
        self.integrity = integrity_snapshot(runtime_class)
        self.tids_allowed = thread_ids()
        self.pool_settled = False
        self.runtime = None

    def loaded(self, runtime) -> None:
        """The artifact is loaded: take the thread baseline where its code runs."""
        self.runtime = runtime
        if self.host_code and not self.in_process:
            self.tids_allowed = runtime.threads_before_load
        self.check_integrity()

    def window(self, allowed=()):
        """The audit window around the artifact's code, where that code runs in this process."""
        if self.in_process and _AUDIT is not None:
            return _AUDIT.window(allowed)
        return _NoWatch()

    def artifact_threads(self) -> set[int]:
        """Thread ids of the process the artifact's code runs in."""
        return thread_ids() if self.in_process or not self.host_code else self.runtime.thread_ids()

    def check_integrity(self) -> None:
        changed = integrity_changed(self.integrity, self.runtime_class)
        if changed:
            raise Rejected("harness-integrity", "the artifact replaced harness or clock functions "
                           f"({', '.join(changed[:6])}): times and results would be forged")

    def after_launch(self) -> None:
        """Host artifacts: no thread of theirs may outlive a call. The first launch may start
        OpenMP's pool (at most its size, and only if the artifact uses OpenMP), which then lives
        on unchanged; any other new thread id, or one that exits later, is background work."""
        self.check_integrity()
        if not self.host_code:
            return  # device code cannot start host threads; the driver's own are not its doing
        self.check_late_writes()
        new = self.artifact_threads() - self.tids_allowed
        if self.pool_settled:
            if new:
                raise Rejected("threads", f"{len(new)} new thread(s) running right after the "
                               "launch returned (work left running in the background)")
            return
        if len(new) > self.omp_pool:
            raise Rejected("threads", f"{len(new)} new thread(s) running right after the first "
                           f"launch returned; an OpenMP pool accounts for at most {self.omp_pool} "
                           "here (work left running in the background)")
        time.sleep(0.02)
        gone = new - self.artifact_threads()
        if gone:
            raise Rejected("threads", f"{len(gone)} thread(s) started by the launch were still "
                           "running after it returned and exited later (background work)")
        self.tids_allowed |= new
        self.pool_settled = True

    def check_late_writes(self) -> None:
        late = self.runtime.late_writes() if hasattr(self.runtime, "late_writes") else []
        if late:
            raise Rejected("late-writes", f"buffer(s) {', '.join(map(repr, late))} changed after "
                           "the call returned (work left running in the background)")

    def stray_threads(self) -> str | None:
        """After the launches of a case: threads of the artifact still running."""
        new = self.artifact_threads() - self.tids_allowed if self.host_code else set()
        if new:
            return (f"{len(new)} new thread(s) running after the launches returned "
                    "(work left running in the background)")
        return None
