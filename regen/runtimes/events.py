"""Event timing shared by the GPU runtimes (CUDA and HIP through torch's event API).

Python's launch overhead (argument packing, a torch.compile guard check) must not land between the
timing events, or a 100 µs kernel reads as 150 µs. Timer.start() therefore queues a spin kernel
(torch.cuda._sleep) between a marker event and the start event: the GPU is still stalled while the
host enqueues the launch, so the start event fires with the launch already queued. hidden() checks
that this held for each sample (the host's enqueue time was shorter than the stall the GPU
measured); the judge (regen/judge/timing.py) lengthens the stall and repeats a sample where it
did not.
"""

from __future__ import annotations

import time

import torch


class Stall:
    """How long the pre-launch spin lasts: `seconds`, converted to spin cycles once."""

    def __init__(self, seconds: float = 200e-6):
        self.seconds = seconds
        self._cycles_per_s: float | None = None

    def cycles(self) -> int:
        if self._cycles_per_s is None:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)  # the spin kernel's module loads outside the measurement
            a.record()
            torch.cuda._sleep(2_000_000)
            b.record()
            b.synchronize()
            self._cycles_per_s = 2_000_000 / max(a.elapsed_time(b) / 1e3, 1e-6)
        return max(1000, int(self.seconds * self._cycles_per_s))

    def observe(self, cycles: int, seconds: float) -> None:
        """Learn from a measured stall: SM clocks ramp up under load, so a calibration taken at an
        idle clock overestimates how long a cycle lasts; the fastest rate seen wins."""
        if seconds > 0 and self._cycles_per_s is not None:
            self._cycles_per_s = max(self._cycles_per_s, cycles / seconds)

    def lengthen(self) -> bool:
        """Double the stall (up to 50 ms); False once it cannot grow."""
        if self.seconds >= 50e-3:
            return False
        self.seconds = min(50e-3, self.seconds * 2)
        return True


class Timer:
    """Device time of the work enqueued between start() and stop(), on torch's current stream."""

    def __init__(self, stall: Stall, synchronize=None):
        self._stall = stall
        self._synchronize = synchronize  # called after stop(): HIP waits for the whole device
        self._marker = torch.cuda.Event(enable_timing=True)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._host = (0.0, 0.0)
        self._cycles = 0

    def start(self) -> None:
        cycles = self._cycles = self._stall.cycles()
        h0 = time.perf_counter()
        self._marker.record()
        torch.cuda._sleep(cycles)
        self._start.record()
        self._host = (h0, h0)

    def stop(self) -> None:
        self._end.record()
        self._host = (self._host[0], time.perf_counter())
        if self._synchronize is not None:
            self._synchronize()

    def seconds(self) -> float:
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3

    def stall_seconds(self) -> float:
        """How long the GPU spun before the start event (part of the host wall time)."""
        self._end.synchronize()
        return self._marker.elapsed_time(self._start) / 1e3

    def hidden(self) -> bool:
        """True when the launch was queued before the start event could fire."""
        stalled = self.stall_seconds()
        self._stall.observe(self._cycles, stalled)
        return self._host[1] - self._host[0] < stalled
