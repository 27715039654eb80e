"""The process groups regen starts in sessions of their own: the judge's child (with the artifact's
process in its group) and a generator command. A terminal's Ctrl-C does not reach them and they
would outlive a regen killed by SIGTERM, so regen tracks them and, on SIGINT, SIGTERM or SIGHUP,
kills every group before it exits (cli.main installs the handlers with `stop_on_signals`)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """regen got a signal. A BaseException, like KeyboardInterrupt, so that no per-node handler
    records an interrupted verification as a failure; cli.main exits 128 + the signal's number."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


_lock = threading.RLock()  # re-entrant: the signal handler runs in the main thread, maybe inside
_groups: dict[int, subprocess.Popen] = {}
_stopped: int | None = None
_starting = threading.local()  # the main thread is inside start(): the handler waits for it
_deferred: int | None = None


def start(args, **kwargs) -> subprocess.Popen:
    """subprocess.Popen in a session of its own, tracked until `finished`. Raises Stopped once
    regen is stopping, so nothing new starts after a signal."""
    global _deferred
    with _lock:
        check()
        _starting.active = True
        try:
            proc = subprocess.Popen(args, start_new_session=True, **kwargs)
            _groups[proc.pid] = proc
        finally:
            _starting.active = False
    if _deferred is not None and threading.current_thread() is threading.main_thread():
        signum, _deferred = _deferred, None
        stop(signum)
        raise Stopped(signum)
    return proc


def finished(proc: subprocess.Popen) -> None:
    """The group's leader was waited for: stop tracking it."""
    with _lock:
        _groups.pop(proc.pid, None)


def check() -> None:
    """Raise Stopped if regen got a signal (a child that died meanwhile died of that, not of the
    artifact)."""
    if _stopped is not None:
        raise Stopped(_stopped)


def stop(signum: int) -> None:
    """Kill every tracked group (SIGKILL: the artifact may ignore anything else); from now on
    `start` and `check` raise Stopped."""
    global _stopped
    with _lock:
        _stopped = signum
        for pgid in list(_groups):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def alive() -> list[int]:
    """The process groups tracked now (their leaders' pids)."""
    with _lock:
        return list(_groups)


@contextmanager
def stop_on_signals():
    """While inside: SIGINT, SIGTERM and SIGHUP kill every tracked group and raise Stopped in the
    main thread. A signal already ignored (nohup, a background job's SIGINT) stays ignored.
    Outside the main thread (where Python cannot set handlers) it does nothing."""
    global _stopped, _deferred
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        global _deferred
        if getattr(_starting, "active", False):  # Popen half done: start() raises when it is
            _deferred = signum
            return
        stop(signum)
        raise Stopped(signum)

    previous = {s: signal.signal(s, handler) for s in SIGNALS
                if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _stopped = _deferred = None
