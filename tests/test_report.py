"""What regen/report.py prints: the bench table (one row per kernel and case, ratios to the
baselines, the spec's expectations, anything that makes a time suspect) and a build's results (one
line per (kernel, target) with the worst case over its variants; --verbose and --json for more)."""

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


def test_bench_table_ignores_checks_that_do_not_apply_to_a_case():
    """A latency-bound case has no floor expectation (ok None): it neither meets nor misses, so
    the verdict comes from the checks that applied, and one without any shows none."""
    out = io.StringIO()
    na = {"check": "floor_fraction", "limit": 0.9, "ok": None, "value": 0.001,
          "note": "latency-bound case (floor: false): no floor expectation"}
    met = {"check": "speedup vs torch_compile", "limit": 1.0, "ok": True, "value": 1.13}
    missed = {**met, "ok": False, "value": 0.87}
    report.bench([_row(case="a", checks=[na, met]), _row(case="b", checks=[na, missed]),
                  _row(case="c", checks=[na])], False, out)
    a, b, c = (next(line for line in out.getvalue().splitlines() if f" {k} " in line)
               for k in "abc")
    assert a.rstrip().endswith(" met")
    assert b.rstrip().endswith("NOT met: speedup vs torch_compile 0.87<1.0")
    assert c.rstrip().endswith("—") and "NOT met" not in c


def test_bench_table_says_when_samples_timed_launch_overhead():
    out = io.StringIO()
    report.bench([_row(launch_exposed=3), _row(kernel="softmax", launch_exposed=0)], False, out)
    rms = next(line for line in out.getvalue().splitlines() if line.startswith("rmsnorm"))
    soft = next(line for line in out.getvalue().splitlines() if line.startswith("softmax"))
    assert "3 of 50 samples timed launch overhead" in rms and "launch overhead" not in soft


# -- build and verify results: one line per (kernel, target) ----------------------------------------
def _result(label="rmsnorm@h200", status="ok", summary=None, variants=50, level=None, record=None,
            checks=()):
    from types import SimpleNamespace

    from regen.build import Result

    kernel, target = label.split("@")
    node = SimpleNamespace(kernel=kernel, target=target, label=label, action="up-to-date",
                           reasons=["verified on NVIDIA H200 at 2026-12-02; no such hardware here"])
    resources = {f"{kernel}_v{i:02d}": {"registers": 30 + i % 17, "spill_store_bytes": 8 * (i == 7),
                                        "shared_bytes": 128} for i in range(variants)}
    where = "verified on NVIDIA H200 (driver 580.159.04) at 2026-12-02"
    return Result(node, status, summary or f"up to date: {where}",
                  level if level is not None else ["compiled (cached)", "resources checked", where],
                  {"ok": True, "resources": resources} if variants else None, list(checks),
                  record if record is not None else {"bench": [_row(floor_fraction=0.93),
                                                               _row(floor_fraction=0.81)]})


def test_a_build_prints_one_line_per_node_with_its_worst_case():
    out = io.StringIO()
    fresh = _result("softmax@cpu", summary="verified 12 cases, max abs error 1e-07", variants=0,
                    level=["compiled in 0.40 s", "verified here (AMD EPYC)"], record={})
    report.build([_result(), fresh], False, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4                                 # header, two nodes, the count
    assert lines[0].split() == ["node", "verdict", "variants", "max", "regs", "spill", "B", "%",
                                "floor"]
    assert lines[1].split()[:6] == ["rmsnorm@h200", "ok", "50", "46", "8", "81%"]
    assert lines[1].endswith("up to date: verified on NVIDIA H200 (driver 580.159.04) at 2026-12-02")
    assert "_v07" not in out.getvalue()                    # no per-variant figures by default
    assert lines[2].split()[:6] == ["softmax@cpu", "ok", "—", "—", "—", "—"]
    assert lines[2].endswith("verified 12 cases, max abs error 1e-07; verified here (AMD EPYC)")
    assert lines[3] == "2 ok"


def test_verbose_adds_the_per_variant_table_and_unmet_expectations():
    out = io.StringIO()
    missed = {"check": "spills rmsnorm_v07", "limit": 0, "ok": False, "value": 8}
    met = {"check": "spills rmsnorm_v01", "limit": 0, "ok": True, "value": 0}
    report.build([_result(status="failed", summary="profile failed: spills", checks=[missed, met])],
                 False, out, verbose=True)
    text = out.getvalue()
    rows = [line.split() for line in text.splitlines() if line.startswith("    rmsnorm_v")]
    assert len(rows) == 50 and ["rmsnorm_v07", "37", "8", "128"] in rows
    assert "    why: verified on NVIDIA H200 at 2026-12-02; no such hardware here" in text
    assert "    ✗ spills rmsnorm_v07: 8 (limit 0)" in text and "1 resource/ISA expectation met" in text


def test_json_keeps_everything_and_adds_the_worst_case():
    import json

    out = io.StringIO()
    report.build([_result()], True, out)
    (node,) = json.loads(out.getvalue())
    assert len(node["compile"]["resources"]) == 50
    assert node["worst"] == {"variants": 50, "max_registers": 46, "max_spill_bytes": 8,
                             "min_floor_fraction": 0.81,
                             "verified": "verified on NVIDIA H200 (driver 580.159.04) at 2026-12-02"}
