"""Profile stage: the spec's expectations against compile resources, disassembly and timings.

Static checks (registers, spills, required instructions) need only a compile, so they run on any
machine; dynamic ones (fraction of the roofline floor, speedup over torch) need the hardware.
"""

from __future__ import annotations

import statistics

from .keys import profile_for


def static_checks(spec, target, resources: dict, disassembly: str | None) -> list[dict]:
    exp = profile_for(spec, target)
    out = []
    if exp["max_registers"] is not None:
        for kernel, res in sorted(resources.items()):
            if "registers" in res:
                out.append({"check": f"registers {kernel}", "limit": exp["max_registers"],
                            "value": res["registers"], "ok": res["registers"] <= exp["max_registers"]})
    if exp["max_spills"] is not None:
        for kernel, res in sorted(resources.items()):
            spills = res.get("spill_store_bytes", res.get("spill_bytes"))
            if spills is not None:
                out.append({"check": f"spills {kernel}", "limit": exp["max_spills"], "value": spills,
                            "ok": spills <= exp["max_spills"]})
    if exp["instructions"]:
        if disassembly is None:
            out.append({"check": "instructions", "limit": exp["instructions"], "value": None,
                        "ok": None, "note": "no disassembler here"})
        else:
            from .sass import missing_instructions

            missing = missing_instructions(disassembly, exp["instructions"])
            out.append({"check": "instructions", "limit": exp["instructions"], "value": missing,
                        "ok": not missing, "note": f"missing {missing}" if missing else ""})
    return out


def floor_terms(spec, target, case) -> list[tuple[float, str, object]]:
    """(seconds, bound, peak) for each roofline term the target has a peak for."""
    bw = target.peak("memory_bandwidth")
    flops_peak = target.peak(f"flops_{spec.case_env(case)['T']}")
    terms = []
    if bw is not None:
        terms.append((spec.case_bytes(case) / bw.value, "memory", bw))
    flops = spec.case_flops(case)
    if flops and flops_peak is not None:
        terms.append((flops / flops_peak.value, "compute", flops_peak))
    return terms


def floor_seconds(spec, target, case) -> tuple[float | None, str]:
    """The roofline floor of one case on a target: max(bytes / bandwidth, flops / peak)."""
    terms = floor_terms(spec, target, case)
    if not terms:
        return None, "no peak"
    seconds, bound, _ = max(terms, key=lambda t: t[0])
    return seconds, bound


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def spread(xs: list[float]) -> float:
    """Relative interquartile spread, as a noise estimate."""
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    m = statistics.median(xs)
    return (q[2] - q[0]) / m if m else 0.0


def judge_timing(spec, target, case, timing: dict) -> dict:
    """Medians and the timing guards, computed outside the process that ran the kernel."""
    dev, wall = timing.get("device_s", []), timing.get("wall_s", [])
    out = {"median_s": median(dev), "wall_median_s": median(wall), "spread": spread(dev),
           "iters": len(dev), "ok": bool(dev)}
    if "launch_exposed" in timing:
        # samples whose host launch overhead reached the device timer even after the longest
        # pre-launch stall (runtimes/events.py): they read slow, never fast
        out["launch_exposed"], out["stall_s"] = timing["launch_exposed"], timing.get("stall_s")
    floor, bound = floor_seconds(spec, target, case)
    out["floor_s"], out["bound"] = floor, bound
    if not dev:
        return {**out, "ok": False, "guard": "timer", "reason": "no timing samples came back"}
    if any(d <= 0 for d in dev):
        return {**out, "ok": False, "guard": "timer", "reason": "non-positive device time reported"}
    if wall and sum(dev) > sum(wall) * 1.05 + 1e-4:
        return {**out, "ok": False, "guard": "timer",
                "reason": f"device time {sum(dev):.4g}s exceeds host wall time {sum(wall):.4g}s: "
                          "the timer was tampered with"}
    if wall and out["wall_median_s"] > 3 * out["median_s"] + 2e-3:
        return {**out, "ok": False, "guard": "other-stream",
                "reason": f"host wall time with a full device sync ({out['wall_median_s'] * 1e6:.0f} µs) "
                          f"is far above the timed {out['median_s'] * 1e6:.0f} µs: work escaped the timed stream"}
    if floor is not None:
        out["floor_fraction"] = floor / out["median_s"]
        # A measured peak (a copy, a cuBLAS GEMM) can be beaten a little by a kernel that only
        # reads, or a better GEMM; a datasheet peak is a hard ceiling. Either way, far below is fake.
        for seconds, term_bound, peak in floor_terms(spec, target, case):
            margin = 0.8 if peak.source == "measured" else 0.9
            if out["median_s"] < seconds * margin:
                return {**out, "ok": False, "guard": "physical-floor",
                        "reason": f"{out['median_s'] * 1e6:.2f} µs is below the physical floor "
                                  f"{seconds * 1e6:.2f} µs ({term_bound}-bound at the "
                                  f"{peak.source} peak): impossible, so not real"}
    return out


def dynamic_checks(spec, target, timing: dict, baselines: dict[str, float | None]) -> list[dict]:
    exp = profile_for(spec, target)
    out = []
    frac = timing.get("floor_fraction")
    if exp["floor_fraction"] is not None and frac is not None:
        out.append({"check": "floor_fraction", "limit": exp["floor_fraction"], "value": round(frac, 4),
                    "ok": frac >= exp["floor_fraction"]})
    for name, minimum in sorted(exp["speedup"].items()):
        base = baselines.get(name)
        if base is None or not timing.get("median_s"):
            out.append({"check": f"speedup vs {name}", "limit": minimum, "value": None, "ok": None,
                        "note": "baseline unavailable"})
            continue
        s = base / timing["median_s"]
        out.append({"check": f"speedup vs {name}", "limit": minimum, "value": round(s, 3),
                    "ok": s >= minimum})
    return out
