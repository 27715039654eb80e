"""The bench table (regen/report.py): one row per kernel and case, ratios to the baselines, the
spec's expectations, and anything that makes a time suspect."""

from __future__ import annotations

import io

from regen import report


def _row(**kw):
    row = {"kernel": "rmsnorm", "target": "h200", "case": "M32768xN4096:bfloat16",
           "median_s": 128.6e-6, "floor_s": 127.8e-6, "floor_fraction": 127.8 / 128.6,
           "baselines": {"torch_eager": 151.3e-6, "torch_compile": 141.4e-6}, "iters": 50,
           "checks": [{"check": "floor_fraction", "limit": 0.9, "ok": True, "value": 0.99}]}
    return {**row, **kw}


def test_bench_table_shows_time_floor_ratios_and_verdict():
    out = io.StringIO()
    missed = {"check": "speedup vs torch_compile", "limit": 1.0, "ok": False, "value": 0.974}
    report.bench([_row(), _row(kernel="swiglu", checks=[missed])], False, out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:4] == ["kernel", "target", "case", "time"]
    rms = next(line for line in lines if line.startswith("rmsnorm"))
    assert "128.6" in rms and "127.8" in rms and "99%" in rms and "1.18x" in rms and "1.10x" in rms
    assert rms.rstrip().endswith("met")
    swiglu = next(line for line in lines if line.startswith("swiglu"))
    assert "NOT met: speedup vs torch_compile 0.974<1.0" in swiglu


def test_bench_table_says_when_samples_timed_launch_overhead():
    out = io.StringIO()
    report.bench([_row(launch_exposed=3), _row(kernel="softmax", launch_exposed=0)], False, out)
    rms = next(line for line in out.getvalue().splitlines() if line.startswith("rmsnorm"))
    soft = next(line for line in out.getvalue().splitlines() if line.startswith("softmax"))
    assert "3 of 50 samples timed launch overhead" in rms and "launch overhead" not in soft
