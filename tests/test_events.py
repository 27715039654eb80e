"""The GPU timer's stall bookkeeping (regen/runtimes/events.py); the timer itself runs on the GPU in
tests/test_runtime_cuda.py."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the GPU timer module needs the torch extra")

from regen.runtimes.events import Stall  # noqa: E402


def test_stall_doubles_up_to_its_cap_and_then_says_so():
    stall = Stall(200e-6)
    seen = []
    while stall.lengthen():
        seen.append(stall.seconds)
    assert seen[0] == pytest.approx(400e-6) and seen[-1] == pytest.approx(50e-3)
    assert all(b == pytest.approx(2 * a) for a, b in zip(seen, seen[1:-1]))
    assert not stall.lengthen() and stall.seconds == pytest.approx(50e-3)


def test_stall_follows_the_fastest_clock_seen():
    stall = Stall(1e-3)
    stall._cycles_per_s = 345e6          # calibrated while the SM clock idled
    assert stall.cycles() == 345_000
    stall.observe(345_000, 0.2e-3)       # the same spin took 0.2 ms once the clock ramped up
    assert stall.cycles() == pytest.approx(1.725e6, rel=1e-6)
    stall.observe(345_000, 1e-3)         # a slower sample never shortens the estimate
    assert stall.cycles() == pytest.approx(1.725e6, rel=1e-6)
