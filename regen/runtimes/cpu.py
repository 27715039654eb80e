"""Host runtime (child side): call an artifact's extern "C" functions on CPU tensors, in a process
of the artifact's own (runtimes/host_exec.py)."""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

PYTHON_API_STATUS = 86  # host_exec.py's exit status when its audit tripwire fires


def cpu_fingerprint() -> dict:
    from regen.hardware import host

    return {**host(), "os": f"{platform.system()} {platform.release()}",
            "runtime": {"torch": torch.__version__}}


class Timer:
    """The artifact's own time: the round trips of its calls, measured here (the judge's side)
    around the request and its reply. That includes one round trip of the control channel (an empty
    one takes 45-85 us on a 2-core machine: `empty_round_trip_s`), which is not subtracted: a
    sample may overstate a tiny kernel but never understates one, so the physical-floor guard
    cannot misfire. Staging copies are outside it. Work that makes no call (a torch baseline, run
    here) is timed by the wall clock."""

    def __init__(self, runtime: "Runtime"):
        self._runtime = runtime

    def start(self):
        self._runtime.call_s, self._runtime.calls, self._runtime.staging_s = 0.0, 0, 0.0
        self._t0 = time.perf_counter()

    def stop(self):
        wall = time.perf_counter() - self._t0
        self._seconds = self._runtime.call_s if self._runtime.calls else wall

    def seconds(self) -> float:
        return self._seconds

    def stall_seconds(self) -> float:
        """The judge's own work inside the timed interval (staging copies, cache flush, snapshot),
        which the judge takes out of the wall time it compares with this timer."""
        return self._runtime.staging_s

    def hidden(self) -> bool:
        return True  # host time: there is no launch gap to hide


class ArtifactDied(RuntimeError):
    """The artifact's process is gone (a crash in the artifact): later cases cannot run. `guard`
    names the guard the judge reports."""

    guard = "crash"


class PythonAPIUsed(ArtifactDied):
    guard = "python-api"


class SandboxViolation(ArtifactDied):
    """The artifact's process made a system call outside its allowlist (host_exec.py): the kernel
    killed it with SIGSYS."""

    guard = "sandbox"


class ControlChannelForged(ArtifactDied):
    """The artifact wrote to its process's control channel (a forged reply)."""

    guard = "result-integrity"


class Runtime:
    """Runs a host artifact in its own process (runtimes/host_exec.py), never in the judge's.

    Buffers are staged through a shared arena (a memfd both processes map): before a launch the
    judge copies every tensor argument in, after it copies them back and keeps a snapshot, so a
    write that lands after the reply (background work) shows as a difference (late_writes())."""

    REPLY_TO_IDLE_S = 2.0  # after a reply, the longest the main thread may block elsewhere

    device = "cpu"
    in_process = False

    def __init__(self, binary_path: str, limits: dict | None = None):
        self.call_s, self.calls, self.staging_s = 0.0, 0, 0.0
        self._flush, self._flush_byte = None, 0
        self._flush_next = False
        self._arena_fd = os.memfd_create("regen-arena", os.MFD_CLOEXEC)
        self._size, self._map, self._bytes = 0, None, None
        self._staged: list[tuple[str, int, int]] = []  # (buffer name, offset, bytes) of the last launch
        self._after = None
        _protect_this_process()
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).with_name("host_exec.py")),
             str(theirs.fileno()), str(self._arena_fd)],
            pass_fds=(theirs.fileno(), self._arena_fd), stdin=subprocess.DEVNULL,
            env=artifact_environment())
        self._child_fd = theirs.fileno()  # pass_fds keeps the number in the child
        theirs.close()
        self._sock, self._pending = ours, b""
        hello = self._reply()
        if not hello.startswith("hello "):
            raise ArtifactDied("the artifact's process did not start")
        self.confinement = hello[len("hello "):]  # "seccomp" or "unconfined: why" (host_exec.py)
        self.threads_before_load = self.thread_ids()
        self._request({"op": "load", "path": os.path.abspath(binary_path)}, expect="ready")
        self.empty_round_trip_s = min(self._round_trip({"op": "ping"}) for _ in range(20))

    # -- the control channel ----------------------------------------------------------------
    def _reply(self) -> str:
        while b"\n" not in self._pending:
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                break
            self._pending += chunk
        line, sep, self._pending = self._pending.partition(b"\n")
        if not sep:
            code = self.proc.wait()
            if code == PYTHON_API_STATUS:
                raise PythonAPIUsed("the host artifact reached the Python interpreter through its C "
                                    "API while it ran (an audit event fired in its process)")
            if code == -signal.SIGSYS:
                raise SandboxViolation(
                    "the artifact's process was killed by its seccomp allowlist (SIGSYS): it made a "
                    "system call a compute kernel does not need (a signal to another process, a new "
                    "process, a signal handler, a file opened for writing, ...)")
            why = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            raise ArtifactDied(f"the artifact's process died ({why})")
        return line.decode()

    def _send(self, msg: dict) -> None:
        try:
            self._sock.sendall(json.dumps(msg).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            self._reply()  # raises ArtifactDied with the exit status
            raise

    def _request(self, msg: dict, expect: str = "ok") -> None:
        self._send(msg)
        answer = self._reply()
        if answer != expect:
            raise RuntimeError(answer[4:] if answer.startswith("err ") else f"unexpected {answer!r}")

    def _round_trip(self, msg: dict) -> float:
        """Seconds from the request until the artifact's process waits for the next one: a reply
        is not enough, since the artifact could write one early on the control channel and go on
        working in its own thread."""
        t0 = time.perf_counter()
        self._request(msg)
        self._wait_idle()
        t1 = time.perf_counter()
        if self._pending or self._unread():
            raise ControlChannelForged("the artifact wrote to its process's control channel: a reply "
                                       "the judge did not ask for (forged completion)")
        return t1 - t0

    def _wait_idle(self) -> None:
        """Until the process's main thread is blocked reading the control socket (Linux
        /proc/PID/syscall: its system call's first argument is that descriptor). Where the file
        cannot be read (no ptrace access), the reply alone ends the call.

        The interpreter goes back to its socket microseconds after it replies. A main thread that
        instead stays blocked in another call (a sleep, a wait on a thread of its own) after the
        reply is an artifact that replied before its work was done: it is not waited out (that
        would let the work finish outside the timed call), it is refused."""
        want = hex(self._child_fd)
        blocked_since, blocked_in = None, None
        while True:
            try:
                with open(f"/proc/{self.proc.pid}/syscall") as f:
                    fields = f.read().split()
            except OSError:
                return
            if len(fields) > 1 and fields[0] != "running" and fields[1] == want:
                return
            if self.proc.poll() is not None:
                return  # gone: the next request reports how
            now = time.perf_counter()
            if fields and fields[0] != "running" and fields == blocked_in:
                if now - blocked_since > self.REPLY_TO_IDLE_S:
                    raise ControlChannelForged(
                        "the artifact's process replied, then stayed blocked in system call "
                        f"{fields[0]} for {self.REPLY_TO_IDLE_S:g} s instead of waiting for the "
                        "next request: a reply sent before the work was done (forged completion)")
            else:
                blocked_since, blocked_in = now, fields
            time.sleep(20e-6)  # yield the core: on a small machine the process needs it to get there

    def _unread(self) -> bool:
        try:
            return bool(self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            return False
    def _reserve(self, size: int) -> None:
        if size <= self._size:
            return
        size = max(size, 2 * self._size, 1 << 20)
        os.ftruncate(self._arena_fd, size)
        self._bytes = None
        self._map = mmap.mmap(self._arena_fd, size)
        self._bytes = torch.frombuffer(self._map, dtype=torch.uint8)
        self._size = size
        self._request({"op": "map", "size": size})

    # -- the runtime interface ----------------------------------------------------------------
    def launch(self, launches, buffers) -> None:
        entered = time.perf_counter()
        placed: dict[tuple[int, int], int] = {}  # (address, bytes) -> arena offset
        staged, calls, end = [], [], 0
        for launch in launches:
            args = []
            for arg in launch.args:
                if arg.kind != "tensor":
                    args.append([arg.kind, arg.value])
                    continue
                t = buffers[arg.value]
                if not t.is_contiguous():
                    raise RuntimeError(f"buffer {arg.value!r} is not contiguous")
                where = (t.data_ptr(), t.nbytes)
                if where not in placed:
                    # the buffer keeps its offset within a page (to 64 bytes): the judge places
                    # buffers at random offsets (judge/buffers.py), the arena must not undo it
                    end += (t.data_ptr() - end) % 4096 // 64 * 64
                    placed[where] = end
                    staged.append((arg.value, end, t.nbytes))
                    end += (t.nbytes + 63) // 64 * 64
                offset = getattr(arg, "offset", 0)   # a view {tensor, offset} into the buffer
                if offset and not 0 <= offset < t.numel():
                    raise RuntimeError(f"offset {offset} lies outside buffer {arg.value!r} "
                                       f"of {t.numel()} elements")
                args.append(["ptr", placed[where] + offset * t.element_size()])
            calls.append([launch.kernel, args])
        _check_disjoint(placed)
        self._staged, self._after = [], None  # the arena is about to hold this launch's buffers
        self._reserve(max(end, 64))
        # single-threaded copies and flush (ctypes.memmove/memset): torch's parallel ops would
        # leave its pool threads spinning on the cores the artifact's call is about to use
        base = self._bytes.data_ptr()
        for name, off, n in staged:
            if n:
                ctypes.memmove(base + off, buffers[name].data_ptr(), n)
        if self._flush_next:  # after staging, which warmed the caches with every buffer
            self._flush_caches()
            self._flush_next = False
        trip = self._round_trip({"op": "run", "calls": calls})
        self.call_s += trip
        self.calls += 1
        for name, off, n in staged:
            if n:
                ctypes.memmove(buffers[name].data_ptr(), base + off, n)
        self._staged = staged
        self._after = self._bytes[:end].clone()
        self.staging_s += time.perf_counter() - entered - trip

    def late_writes(self) -> list[str]:
        """Buffers of the last launch whose arena bytes changed after its reply."""
        if self._after is None:
            return []
        return [name for name, off, n in self._staged
                if n and not torch.equal(self._bytes[off:off + n], self._after[off:off + n])]

    @property
    def pid(self) -> int:
        """The artifact's process (its main thread's id): judge/watch.py reads its threads."""
        return self.proc.pid

    def thread_ids(self) -> set[int]:
        """The artifact process's kernel thread ids, as the kernel reports them."""
        try:
            return {int(t) for t in os.listdir(f"/proc/{self.proc.pid}/task")}
        except OSError:
            return set()

    def synchronize(self) -> None:
        pass  # calls are synchronous; the judge checks late writes and stray threads (judge/watch.py)

    def timer(self) -> Timer:
        return Timer(self)

    def flush_cache(self) -> None:
        """Deferred to the next launch, after its buffers are staged (which would warm them)."""
        self._flush_next = True

    def _flush_caches(self) -> None:
        if self._flush is None:
            self._flush = (ctypes.c_char * (64 * 2**20))()
        self._flush_byte = (self._flush_byte + 1) & 0xFF
        ctypes.memset(self._flush, self._flush_byte, len(self._flush))

    def fingerprint(self) -> dict:
        return cpu_fingerprint()

    def close(self) -> None:
        self._sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def artifact_environment() -> dict:
    """The artifact's process's environment: OpenMP's idle threads sleep at once (passive wait
    policy) instead of spinning for milliseconds after each region, so a thread still using the
    CPU after a call returned is work, not a pool that spins (judge/watch.py). The wait policy
    changes how long a region takes to wake its team, never what the kernel computes."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_WAIT_POLICY")}
    env["OMP_WAIT_POLICY"] = "passive"
    return env


def _protect_this_process() -> None:
    """The judge's process is not dumpable: another process of the same user cannot read its
    memory (the reference outputs) or environment through /proc (the artifact's process has also
    dropped its capabilities, host_exec.py)."""
    if sys.platform == "linux":
        try:
            ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
        except (AttributeError, OSError):
            pass


def _check_disjoint(placed: dict) -> None:
    """Distinct buffers must not overlap: each is staged on its own, so aliasing would be lost."""
    spans = sorted((addr, addr + n) for (addr, n) in placed if n)
    for (a0, a1), (b0, _b1) in zip(spans, spans[1:]):
        if b0 < a1:
            raise RuntimeError("two buffers of one launch overlap in memory without being the same")
