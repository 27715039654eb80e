"""Timing, both halves.

Child side (TimedLoop): raw samples only. Timed iterations rotate among independently drawn input
sets, perturb them before every iteration (a cache keyed on pointers or sampled contents replays
stale results), re-poison the outputs, flush caches, and record host wall time with a full device
sync beside the device timer (whose start event waits behind a spin, so Python's launch overhead
is not timed: regen/runtimes/events.py). After the loop every set's outputs must match the
reference of what its inputs hold.

Parent side (judge_timing): medians and the timing guards (`timer`, `other-stream`,
`physical-floor`), computed outside the process that ran the kernel.
"""

from __future__ import annotations

import statistics
import time

from .compare import compare, inputs_unchanged
from .guards import Rejected
from .results import CaseResult, Rejection

_clock = time.perf_counter  # captured before any artifact is loaded; wall times use this one


# -- child side ------------------------------------------------------------------------------------
class TimedLoop:
    def __init__(self, harness):
        self.h = harness

    def time_case(self, case, seeds: list[int], iters: int, warmup: int) -> dict:
        try:
            return self._time_case(case, seeds, iters, warmup)
        except Rejected as r:
            return {"device_s": [], "wall_s": [], "ok": False, "guard": r.guard,
                    "reason": r.reason}

    def _time_case(self, case, seeds: list[int], iters: int, warmup: int) -> dict:
        from regen.recipe import bind

        h, b = self.h, self.h.buffers
        view = b.case_view(case)
        sets = [b.make_inputs(case, view, s) for s in seeds]
        # what every set must hold when the kernel leaves it alone (perturbed alongside), and a
        # donor of fresh values drawn from the same distribution
        shadows = [{k: v.clone() for k, v in inp.items()} for inp in sets]
        donor = b.make_inputs(case, view, (seeds[0] * 2654435761 + 1) % 2**31)
        bufs = [b.poisoned(case, inp, "sentinel") for inp in sets]
        env = h.spec.case_env(case)
        launches = [bind(h.recipe, env, set({**sets[i], **bufs[i]}), env["T"])
                    for i in range(len(sets))]

        def prepare(k):
            b.restore_inplace(sets[k], shadows[k])
            b.refresh(case, bufs[k], "sentinel")

        for i in range(warmup):
            k = i % len(sets)
            prepare(k)
            h.launch(launches[k], {**sets[k], **bufs[k]})
        h.runtime.synchronize()
        device_s, wall_s, exposed = [], [], 0
        for i in range(iters):
            k = i % len(sets)
            b.perturb(sets[k], shadows[k], donor)

            def run(k=k):
                with h.watch.window():
                    h.runtime.launch(launches[k], {**sets[k], **bufs[k]})

            device, wall, hidden = self.timed_sample(lambda k=k: prepare(k), run)
            device_s.append(device)
            wall_s.append(wall)
            exposed += not hidden
            h.watch.after_launch()
        bad = self._check_sets(case, view, sets, shadows, bufs)
        return {"device_s": device_s, "wall_s": wall_s, "ok": bad is None,
                "reason": bad.reason if bad else None, "guard": bad.guard if bad else None,
                **self.stall_report(exposed)}

    def _check_sets(self, case, view, sets, shadows, bufs) -> CaseResult | None:
        """Every set's outputs must be right for what its inputs hold now, and the inputs must
        hold exactly what regen put there (no replay of stale results, no mutated inputs)."""
        h = self.h
        checks = []
        for k in range(len(sets)):
            changed = inputs_unchanged(sets[k], shadows[k], h.buffers.inplace)
            if changed:
                checks.append(CaseResult.failed("inputs-unchanged", changed))
                continue
            want = h.oracle.reference({n: v.clone() for n, v in shadows[k].items()}, view)
            got = {t.name: bufs[k][t.name] for t in h.spec.signature.outputs}
            checks.append(compare(h.spec, case, got, want, "sentinel"))
        return next((c for c in checks if not c.ok), None)

    def timed_sample(self, prepare, run) -> tuple[float, float, bool]:
        """One timed run: (device seconds, host wall seconds with a full device sync, whether the
        host's launch overhead stayed outside the device timer). Where it did not, the stall
        before the start event is doubled and the sample taken again (runtimes/events.py)."""
        runtime = self.h.runtime
        stall = getattr(runtime, "stall", None)
        while True:
            prepare()
            runtime.flush_cache()
            runtime.synchronize()
            timer = runtime.timer()
            w0 = _clock()
            timer.start()
            run()
            timer.stop()
            runtime.synchronize()
            wall = _clock() - w0 - timer.stall_seconds()
            hidden = timer.hidden()
            if hidden or stall is None or not stall.lengthen():
                return timer.seconds(), wall, hidden

    def stall_report(self, exposed: int) -> dict:
        stall = getattr(self.h.runtime, "stall", None)
        if stall is None:
            return {}
        return {"stall_s": stall.seconds, "launch_exposed": exposed}

    def time_baseline(self, case, seeds: list[int], iters: int, warmup: int, mode: str) -> dict:
        h = self.h
        fn = getattr(h.oracle, "baseline", None) or h.oracle.reference
        view = h.buffers.case_view(case)
        if mode == "torch_compile":
            try:
                fn = h.torch.compile(fn)
            except Exception as exc:  # noqa: BLE001
                return {"error": f"torch.compile failed: {exc}"}
        sets = [h.buffers.make_inputs(case, view, s) for s in seeds]
        try:
            for i in range(warmup):
                fn(sets[i % len(sets)], view)
            h.runtime.synchronize()
            samples, exposed = [], 0
            for i in range(iters):
                device, _wall, hidden = self.timed_sample(
                    lambda: None, lambda i=i: fn(sets[i % len(sets)], view))
                samples.append(device)
                exposed += not hidden
        except Exception as exc:  # noqa: BLE001
            return {"error": f"{type(exc).__name__}: {exc}"[:500]}
        return {"device_s": samples, **self.stall_report(exposed)}


# -- parent side -----------------------------------------------------------------------------------
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
    from regen.profile import floor_seconds

    dev, wall = timing.get("device_s", []), timing.get("wall_s", [])
    out = {"median_s": median(dev), "wall_median_s": median(wall), "spread": spread(dev),
           "iters": len(dev), "ok": bool(dev)}
    if "launch_exposed" in timing:
        # samples whose host launch overhead reached the device timer even after the longest
        # pre-launch stall (runtimes/events.py): they read slow, never fast
        out["launch_exposed"], out["stall_s"] = timing["launch_exposed"], timing.get("stall_s")
    floor, bound = floor_seconds(spec, target, case)
    out["floor_s"], out["bound"] = floor, bound
    rejection = _timing_rejection(spec, target, case, dev, wall, out)
    if rejection is not None:
        return {**out, "ok": False, **rejection.to_json()}
    return out


def _timing_rejection(spec, target, case, dev, wall, out: dict) -> Rejection | None:
    """The first timing guard the samples fail (sets out["floor_fraction"] on the way)."""
    from regen.profile import floor_terms

    if not dev:
        return Rejection("timer", "no timing samples came back")
    if any(d <= 0 for d in dev):
        return Rejection("timer", "non-positive device time reported")
    if wall and sum(dev) > sum(wall) * 1.05 + 1e-4:
        return Rejection("timer", f"device time {sum(dev):.4g}s exceeds host wall time "
                         f"{sum(wall):.4g}s: the timer was tampered with")
    if wall and out["wall_median_s"] > 3 * out["median_s"] + 2e-3:
        return Rejection("other-stream", "host wall time with a full device sync "
                         f"({out['wall_median_s'] * 1e6:.0f} µs) is far above the timed "
                         f"{out['median_s'] * 1e6:.0f} µs: work escaped the timed stream")
    if out["floor_s"] is None:
        return None
    out["floor_fraction"] = out["floor_s"] / out["median_s"]
    # A measured peak (a copy, a cuBLAS GEMM) can be beaten a little by a kernel that only
    # reads, or a better GEMM; a datasheet peak is a hard ceiling. Either way, far below is fake.
    for seconds, term_bound, peak in floor_terms(spec, target, case):
        margin = 0.8 if peak.source == "measured" else 0.9
        if out["median_s"] < seconds * margin:
            return Rejection("physical-floor", f"{out['median_s'] * 1e6:.2f} µs is below the "
                             f"physical floor {seconds * 1e6:.2f} µs ({term_bound}-bound at the "
                             f"{peak.source} peak): impossible, so not real")
    return None
