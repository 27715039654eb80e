"""REGEN_TRACE=1: the judge says on stderr where a verification spends its time, while it runs.

A verification is one child process that reports only when every case is done, so a run stopped
by a budget (a lent GPU's minutes) or a timeout shows nothing of how far it got. With REGEN_TRACE
set the child writes a line per correctness seed (inputs, candidate, reference, comparisons) and
per timed implementation (the candidate, each baseline, the peers) as each finishes, and the parent
lets the child's stderr through instead of keeping its tail for a crash report. The parent reads
the variable and passes the flag in the job (unlinked before the artifact loads); the child's
environment does not carry it, so an artifact sees the same environment traced or not. Diagnostic only:
nothing reads these lines back, so an artifact writing to the same stderr can only add noise.
"""

from __future__ import annotations

import os
import sys
import time


def enabled() -> bool:
    return os.environ.get("REGEN_TRACE", "") not in ("", "0")


class Trace:
    """trace(msg) prints `[judge   12.3 s] msg`; phases(label) times consecutive phases of one
    piece of work and prints them on one line."""

    def __init__(self, on: bool):
        self.on = on
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        if self.on:
            print(f"[judge {time.monotonic() - self.t0:7.1f} s] {msg}", file=sys.stderr, flush=True)

    def phases(self, label: str) -> Phases:
        return Phases(self, label)


class Phases:
    """mark(name) ends the phase that began at the previous mark; done() prints them."""

    def __init__(self, trace: Trace, label: str):
        self.trace, self.label = trace, label
        self.last = time.monotonic()
        self.parts: list[str] = []

    def mark(self, name: str) -> None:
        if self.trace.on:
            now = time.monotonic()
            self.parts.append(f"{name} {now - self.last:.2f} s")
            self.last = now

    def done(self, outcome: str = "") -> None:
        if self.trace.on:
            self.trace(f"{self.label}: {', '.join(self.parts)}{f' -> {outcome}' if outcome else ''}")
