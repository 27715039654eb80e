"""Child side: what is watched around every launch of the artifact.

- Python audit events while a host artifact's code runs in this process (`python-api`): a kernel
  that calls into Python (PyRun_SimpleString, imports, patching classes) raises them, and audit
  hooks cannot be removed;
- the clock, the judge's own functions and the runtime's methods must be the ones captured before
  the artifact was loaded (`harness-integrity`);
- host artifacts: no thread of theirs may work after a call returned (`threads`), and no staged
  buffer may change after it (`late-writes`).

Threads of a host artifact's process, after every call: each one other than the main thread must
be parked (blocked in a futex wait with no timeout: nothing in the process can wake it until the
next call, since no signal handler can be installed there and no other thread runs) inside
OpenMP's runtime (libgomp's own futex call) within SETTLE_S, having used at most CPU_BUDGET_NS of
CPU since the reply; and parked threads must stay parked, on no more CPU, until the next call.
That is what OpenMP's pool is between regions, however and whenever it started (a pool started
on a later, larger launch is honest); a thread that sleeps, waits with a timeout, spins, computes
or waits anywhere else is not, whoever started it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

from .guards import GUARDS, Rejected


def thread_ids() -> set[int]:
    """Kernel thread ids of this process (every thread, not only those Python knows about)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return {t.native_id for t in threading.enumerate()}


# how long the judge waits for the artifact's threads to park after a call, and the CPU each may
# use meanwhile: libgomp's idle threads (passive wait policy, runtimes/cpu.py) take microseconds
SETTLE_S = 2.0
CPU_BUDGET_NS = 1_000_000
_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)
_SLEEPS = {"x86_64": (35, 230), "aarch64": (101, 115)}.get(os.uname().machine, ())
_FUTEX_WAITS = (0, 9)  # FUTEX_WAIT, FUTEX_WAIT_BITSET (with FUTEX_PRIVATE_FLAG, clock flags)


@dataclass(frozen=True)
class ThreadState:
    parked: bool   # blocked in a futex wait with no timeout
    cpu_ns: int    # CPU time used so far
    doing: str     # what it does, for the reason
    pc: int = 0    # where it waits (user instruction pointer), when blocked


def pool_code(pid: int) -> list[tuple[int, int]]:
    """The executable mappings of OpenMP's runtime (libgomp) in process `pid`: an idle pool thread
    waits on its futex there (libgomp makes that system call itself), not in libc or the
    artifact."""
    spans = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "x" in parts[1] and \
                        os.path.basename(parts[5]).startswith("libgomp"):
                    lo, hi = (int(a, 16) for a in parts[0].split("-"))
                    spans.append((lo, hi))
    except OSError:
        pass
    return spans


def thread_state(pid: int, tid: int) -> ThreadState | None:
    """What thread `tid` of process `pid` is doing (/proc; None once it is gone)."""
    base = f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{base}/schedstat") as f:
            cpu_ns = int(f.read().split()[0])
        with open(f"{base}/syscall") as f:
            fields = f.read().split()
    except (OSError, ValueError, IndexError):
        return None
    if not fields or fields[0] == "running":
        return ThreadState(False, cpu_ns, "running")
    if fields[0] == "-1":
        return ThreadState(False, cpu_ns, "blocked outside a system call")
    nr = int(fields[0])
    args = [int(a, 16) for a in fields[1:7]]
    pc = int(fields[-1], 16) if len(fields) >= 9 else 0
    if nr == _FUTEX and (args[1] & 0x7F) in _FUTEX_WAITS:
        if args[3] == 0:
            return ThreadState(True, cpu_ns, "parked", pc)
        return ThreadState(False, cpu_ns, "waiting with a timeout", pc)
    if nr in _SLEEPS:
        return ThreadState(False, cpu_ns, "sleeping", pc)
    return ThreadState(False, cpu_ns, f"in system call {nr}", pc)


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


class _LoadWindow:
    def __init__(self, inner):
        self.inner = inner

    def __enter__(self):
        return self.inner.__enter__()

    def __exit__(self, kind, exc, tb):
        if self.inner.__exit__(kind, exc, tb):
            return True
        guard = getattr(exc, "guard", None)
        if exc is not None and guard in GUARDS and not isinstance(exc, Rejected):
            raise Rejected(guard, f"while the artifact loaded: {exc}") from exc
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
        self.parked: dict[int, int] = {}  # parked threads of the artifact's process: CPU ns
        self.runtime = None

    def loaded(self, runtime) -> None:
        """The artifact is loaded: take the thread baseline where its code runs."""
        self.runtime = runtime
        if self.host_code and not self.in_process:
            self.tids_allowed = runtime.threads_before_load
        self.check_integrity()

    def window(self, allowed=()):
        """The audit window around the artifact's code, where that code runs in this process.
        Around the load (no runtime yet), a death of the artifact's process rejects the artifact
        with the guard the runtime names (a load-time constructor that broke the sandbox)."""
        inner = _AUDIT.window(allowed) if self.in_process and _AUDIT is not None else _NoWatch()
        return inner if self.runtime is not None else _LoadWindow(inner)

    def artifact_threads(self) -> set[int]:
        """Thread ids of the process the artifact's code runs in."""
        return thread_ids() if self.in_process or not self.host_code else self.runtime.thread_ids()

    def check_integrity(self) -> None:
        changed = integrity_changed(self.integrity, self.runtime_class)
        if changed:
            raise Rejected("harness-integrity", "the artifact replaced harness or clock functions "
                           f"({', '.join(changed[:6])}): times and results would be forged")

    def after_launch(self) -> None:
        """Host artifacts: no thread of theirs may work after a call (see the module docstring).
        In this process (no process of its own to read), the first launch may start OpenMP's
        pool (at most its size, and only if the artifact uses OpenMP), which then lives on
        unchanged; any other new thread id, or one that exits later, is background work."""
        self.check_integrity()
        if not self.host_code:
            return  # device code cannot start host threads; the driver's own are not its doing
        self.check_late_writes()
        if self.parks_threads():
            self.parked = self.settle()
            self.check_late_writes()  # after the wait: a write made meanwhile is late too
            return
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

    def parks_threads(self) -> bool:
        """Whether the artifact runs in a process of its own whose threads the judge can read."""
        if not self.host_code or self.in_process or _FUTEX is None:
            return False
        pid = getattr(self.runtime, "pid", None)
        return pid is not None and thread_state(pid, pid) is not None

    def settle(self) -> dict[int, int]:
        """Wait until every thread but the main one is parked; then {tid: CPU ns}. A thread that
        uses more than CPU_BUDGET_NS after the reply, or is not parked after SETTLE_S, rejects the
        launch (`threads`)."""
        pid = self.runtime.pid
        since: dict[int, int] = {}  # CPU ns when first seen after the reply
        deadline = time.monotonic() + SETTLE_S
        while True:
            states = {tid: thread_state(pid, tid) for tid in self.artifact_threads() - {pid}}
            states = {tid: st for tid, st in states.items() if st is not None}
            for tid, st in states.items():
                since.setdefault(tid, st.cpu_ns)  # first seen now: counted from here
            busy = {tid: st for tid, st in states.items() if not st.parked}
            for tid, st in states.items():
                used = st.cpu_ns - since[tid]
                if used > CPU_BUDGET_NS:
                    raise Rejected("threads", f"a thread of the artifact used {used / 1e6:.1f} ms of "
                                   f"CPU after the call returned ({st.doing}): work left running "
                                   "in the background")
            if not busy:
                pool = pool_code(pid)
                foreign = [tid for tid, st in states.items()
                           if not any(lo <= st.pc < hi for lo, hi in pool)]
                if foreign:
                    raise Rejected("threads", f"{len(foreign)} thread(s) of the artifact's own "
                                   "(not OpenMP's pool: waiting outside libgomp) still there after "
                                   "the call returned; a host kernel may start no thread but "
                                   "OpenMP's")
                return {tid: st.cpu_ns for tid, st in states.items()}
            if time.monotonic() > deadline:
                doing = sorted({st.doing for st in busy.values()})
                raise Rejected("threads", f"{len(busy)} thread(s) of the artifact not idle "
                               f"{SETTLE_S:.0f} s after the call returned ({', '.join(doing)}): work "
                               "left running in the background (an idle OpenMP thread waits on a "
                               "futex with no timeout)")
            time.sleep(0.0005)

    def stray_threads(self) -> str | None:
        """After the launches of a case: threads of the artifact still running."""
        if self.parks_threads():
            pid, parked = self.runtime.pid, getattr(self, "parked", {})
            for tid in self.artifact_threads() - {pid}:
                st = thread_state(pid, tid)
                if st is None:
                    continue
                if tid not in parked or not st.parked or st.cpu_ns - parked[tid] > CPU_BUDGET_NS:
                    return (f"a thread of the artifact {'started' if tid not in parked else st.doing}"
                            " after the launch returned (work left running in the background)")
            gone = [tid for tid in parked if thread_state(pid, tid) is None]
            if gone:
                return (f"{len(gone)} idle thread(s) of the artifact woke and exited after the "
                        "launch returned (work left running in the background)")
            return None
        new = self.artifact_threads() - self.tids_allowed if self.host_code else set()
        if new:
            return (f"{len(new)} new thread(s) running after the launches returned "
                    "(work left running in the background)")
        return None
