"""Profile stage: the spec's expectations against compile resources, disassembly and timings.

Static checks (registers, spills, required instructions) need only a compile, so they run on any
machine; dynamic ones (fraction of the roofline floor, speedup over torch) need the hardware.
The timing guards that run before them (physical floor, device vs wall time) are the judge's:
regen/judge/timing.py.
"""

from __future__ import annotations

import math

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
    flops_peak = target.peak(f"flops_{spec.profile.compute or spec.case_env(case)['T']}")
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


def memory_bytes(spec, recipe_text: str, case) -> int:
    """Device (or host) memory one call of the artifact needs beyond its inputs: its outputs
    (in-place ones reuse an input) and the workspaces its recipe declares. regen allocates
    both; a GPU kernel cannot allocate more than the small device heap, so this is its peak.
    A peer's figure is measured (torch's peak allocation during one call, outputs included)."""
    from .dtypes import itemsize
    from .recipe import parse_recipe, workspace_shapes

    env = spec.case_env(case)
    total = 0
    for t in spec.signature.outputs:
        if not t.inplace_of:
            n = 1
            for d in spec.tensor_shape(t, case):
                n *= d
            total += n * itemsize(spec.tensor_dtype(t, case))
    for dtype, shape, _zero in workspace_shapes(parse_recipe(recipe_text), env).values():
        n = 1
        for d in shape:
            n *= d
        total += n * itemsize(dtype)
    return total


def dynamic_checks(spec, target, timing: dict, baselines: dict[str, float | None],
                   case=None) -> list[dict]:
    exp = profile_for(spec, target)
    out = []
    if exp.get("memory") is not None and case is not None and timing.get("memory_bytes") is not None:
        from . import expr

        limit = int(expr.evaluate(exp["memory"], spec.case_env(case)))
        out.append({"check": "memory", "limit": limit, "value": timing["memory_bytes"],
                    "ok": timing["memory_bytes"] <= limit})
    frac = timing.get("floor_fraction")
    if exp["floor_fraction"] is not None and frac is not None and case is not None \
            and not case.floor:
        out.append({"check": "floor_fraction", "limit": exp["floor_fraction"],
                    "value": round(frac, 4), "ok": None,
                    "note": "latency-bound case (floor: false): no floor expectation"})
    elif exp["floor_fraction"] is not None and frac is not None:
        out.append({"check": "floor_fraction", "limit": exp["floor_fraction"], "value": round(frac, 4),
                    "ok": frac >= exp["floor_fraction"]})
    for name, minimum in sorted(exp["speedup"].items()):
        base = baselines.get(name)
        if base is None or not timing.get("median_s"):
            out.append({"check": f"speedup vs {name}", "limit": minimum, "value": None, "ok": None,
                        "note": "baseline unavailable"})
            continue
        s = base / timing["median_s"]
        out.append({"check": f"speedup vs {name}", "limit": minimum, "value": round(s, 4),
                    "ok": s >= minimum})
    return out


GEOMEAN_CASE = "(geomean of the benchmark cases)"
"""The case an expectation over the whole benchmark set is reported under."""


def geomean_checks(spec, target, rows: list[dict]) -> list[dict]:
    """The spec's geomean_speedup expectations over one run's rows (dynamic_checks' bench rows,
    each with "case", "median_s" and "baselines"). Only a run of every benchmark case of the
    spec on this target decides one: a run of chosen cases (`regen bench --case`) is no
    evidence about the set, and a case whose baseline did not run leaves it undecided."""
    exp = profile_for(spec, target).get("geomean_speedup")
    if not exp:
        return []
    default = spec.signature.dtypes[0]
    wanted = [c.label(default) for c in spec.bench_cases(target)]
    by_case = {r["case"]: r for r in rows}
    if not wanted or not all(w in by_case for w in wanted):
        return []
    out = []
    for name, minimum in sorted(exp.items()):
        ratios = []
        for w in wanted:
            r = by_case[w]
            base = (r.get("baselines") or {}).get(name) if name != "best_peer" else \
                (r.get("peers") or {}).get(r.get("best_peer"))
            t = r.get("median_s") if r.get("ok", True) is not False else None
            ratios.append(base / t if base and t else None)
        check = {"check": f"geomean speedup vs {name}", "limit": minimum,
                 "cases": len(wanted)}
        if any(x is None for x in ratios):
            missing = [w for w, x in zip(wanted, ratios) if x is None]
            out.append({**check, "value": None, "ok": None,
                        "note": f"undecided: no time or no {name} time for {', '.join(missing)}"})
            continue
        g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        out.append({**check, "value": round(g, 4), "ok": g >= minimum})
    return out
