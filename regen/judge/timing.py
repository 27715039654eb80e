"""Timing, both halves.

Child side (TimedLoop): raw samples only. How many iterations run, which of the independently
drawn input sets each one uses, and which are checked are drawn per run (`plan`). Before every
iteration the set is perturbed (a cache keyed on pointers or sampled contents replays stale
results) and the outputs get a fill drawn for it (buffers.py; sometimes the previous outputs,
as in production); caches are flushed and host wall time is recorded with a full device sync
beside the device timer (whose start event waits behind a spin, so Python's launch overhead is
not timed: regen/runtimes/events.py). After a checked iteration, outside the timed region, its
outputs must match the reference of what its inputs hold; on one of them the candidate also runs
untimed on the same inputs and the two results must agree. A kernel that skips the work of any
share of its calls is caught with the probability that one of those calls is checked.

Parent side (judge_timing): medians and the timing guards (`timer`, `other-stream`,
`physical-floor`), computed outside the process that ran the kernel.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time

from .compare import agree, compare, inputs_unchanged
from .guards import Rejected
from .results import CaseResult, Rejection

_clock = time.perf_counter  # captured before any artifact is loaded; wall times use this one
# Several GPUs of one host verified at once (the Ray executor, one worker per GPU): their timed
# loops take this host-wide lock in turn, so one GPU's timing never shares the host's CPU, PCIe
# and power budget with another's. Read before any artifact is loaded; unset: no lock.
_HOST_TIMING_LOCK = os.environ.get("REGEN_TIMING_LOCK")


@contextlib.contextmanager
def host_timing_lock():
    """Hold the host's timing lock (REGEN_TIMING_LOCK, a file path) while timing, if set."""
    if not _HOST_TIMING_LOCK:
        yield
        return
    import fcntl

    with open(_HOST_TIMING_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# -- child side ------------------------------------------------------------------------------------
CHECK_FRACTION = 0.3   # the share of timed iterations whose outputs are checked (at least 2)


class TimedLoop:
    def __init__(self, harness):
        self.h = harness

    def time_case(self, case, seeds: list[int], iters: int, warmup: int) -> dict:
        try:
            return self._time_case(case, seeds, iters, warmup)
        except Rejected as r:
            return {"device_s": [], "wall_s": [], "ok": False, "guard": r.guard,
                    "reason": r.reason}

    def plan(self, n_sets: int, iters: int, warmup: int) -> tuple[list[int], list[int], set[int]]:
        """(warmup set order, timed set order, checked iterations), all drawn per run: how many
        iterations, which input set each uses and which are checked cannot be predicted, so a
        kernel that counts its calls cannot tell which of its results will be looked at."""
        rng = self.h.buffers.rng
        n = iters + rng.randrange(iters // 2 + 1)
        w = warmup + rng.randrange(3)
        order = [rng.randrange(n_sets) for _ in range(n)]
        checked = {i for i in range(n) if rng.random() < CHECK_FRACTION}
        while len(checked) < min(2, n):
            checked.add(rng.randrange(n))
        return [rng.randrange(n_sets) for _ in range(w)], order, checked

    def _time_case(self, case, seeds: list[int], iters: int, warmup: int) -> dict:
        from regen.recipe import bind

        h, b = self.h, self.h.buffers
        view = b.case_view(case)
        sets = [b.make_inputs(case, view, s) for s in seeds]
        # what every set must hold when the kernel leaves it alone (perturbed alongside), and a
        # donor of fresh values drawn from the same distribution
        shadows = [{k: v.clone() for k, v in inp.items()} for inp in sets]
        donor = b.make_inputs(case, view, (seeds[0] * 2654435761 + 1) % 2**31)
        bufs = [b.outputs(case, inp, b.draw_kind()) for inp in sets]
        env = h.spec.case_env(case)
        launches = [bind(h.recipe, env, {**sets[i], **bufs[i]}, env["T"])
                    for i in range(len(sets))]
        warm, order, checked = self.plan(len(sets), iters, warmup)
        compare_untimed = b.rng.choice(sorted(checked))
        fills: dict = {}

        def prepare(k, check):
            b.restore_inplace(sets[k], shadows[k])
            kept = b.refresh(case, bufs[k], b.draw_kind(timed=True), keep=check)
            fills["now"] = kept

        for k in warm:
            prepare(k, False)
            h.launch(launches[k], {**sets[k], **bufs[k]})
        h.runtime.synchronize()
        device_s, wall_s, exposed = [], [], 0
        for i, k in enumerate(order):
            b.perturb(sets[k], shadows[k], donor)
            check = i in checked

            def run(k=k):
                with h.watch.window():
                    h.runtime.launch(launches[k], {**sets[k], **bufs[k]})

            device, wall, hidden = self.timed_sample(lambda k=k, c=check: prepare(k, c), run)
            device_s.append(device)
            wall_s.append(wall)
            exposed += not hidden
            h.watch.after_launch()
            if check:
                bad = self._check(case, view, sets[k], shadows[k], bufs[k], fills["now"],
                                  launches[k] if i == compare_untimed else None)
                if bad is not None:
                    return {"device_s": device_s, "wall_s": wall_s, "ok": False,
                            "reason": f"timed iteration {i + 1} of {len(order)}: {bad.reason}",
                            "guard": bad.guard, **self.stall_report(exposed)}
        return {"device_s": device_s, "wall_s": wall_s, "ok": True, "reason": None, "guard": None,
                "checked": len(checked), **self.stall_report(exposed)}

    def _check(self, case, view, inputs, shadow, bufs, fills, launches) -> CaseResult | None:
        """A checked timed iteration (outside the timed region): the outputs must be right for
        what its inputs hold now, and the inputs exactly what regen put there. With `launches`,
        the candidate also runs untimed on the same inputs and the two results must agree."""
        h = self.h
        changed = inputs_unchanged(inputs, shadow, h.buffers.inplace)
        if changed:
            return CaseResult.failed("inputs-unchanged", changed)
        want = h.oracle.reference({n: v.clone() for n, v in shadow.items()}, view)
        names = [t.name for t in h.spec.signature.outputs]
        got = {n: bufs[n] for n in names}
        res = compare(h.spec, case, got, want, fills)
        if not res.ok or launches is None:
            return None if res.ok else res
        timed = {n: bufs[n].clone() for n in names}
        h.buffers.restore_inplace(inputs, shadow)
        again = h.buffers.refresh(case, bufs, h.buffers.draw_kind(), keep=True, avoid=fills)
        h.launch(launches, {**inputs, **bufs})
        h.runtime.synchronize()
        res = compare(h.spec, case, got, want, again)
        if res.ok:
            res = agree(h.spec, case, timed, got)
        changed = inputs_unchanged(inputs, shadow, h.buffers.inplace)
        if changed:
            return CaseResult.failed("inputs-unchanged", changed)
        return None if res.ok else res

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
        return self._time_fn(fn, view, sets, iters, warmup)

    def _time_fn(self, fn, view, sets: list[dict], iters: int, warmup: int) -> dict:
        """Device time of a Python callable (a baseline, a peer) with the candidate's method:
        flushed caches, the start event behind the stall, one sample per call."""
        try:
            for i in range(warmup):
                fn(sets[i % len(sets)], view)
            self.h.runtime.synchronize()
            samples, exposed = [], 0
            for i in range(iters):
                device, _wall, hidden = self.timed_sample(
                    lambda: None, lambda i=i: fn(sets[i % len(sets)], view))
                samples.append(device)
                exposed += not hidden
        except Exception as exc:  # noqa: BLE001
            return {"error": f"{type(exc).__name__}: {exc}"[:500]}
        return {"device_s": samples, **self.stall_report(exposed)}

    def time_peers(self, case, seeds: list[int], iters: int, warmup: int) -> dict:
        """The oracle's peers (`peers()`: {name: fn(inputs, case) -> outputs}), each timed like
        the candidate. A peer whose package is missing, that raises (an unsupported dtype), or
        that returns something else than the spec's outputs is not timed: its entry says why in
        one line. A peer's outputs are checked once against the reference; one off by more than
        the spec's tolerance is timed but marked, and never counts as the best peer."""
        make = getattr(self.h.oracle, "peers", None)
        if make is None:
            return {}
        try:
            peers = make()
        except Exception as exc:  # noqa: BLE001
            return {"peers()": {"skipped": _one_line(f"peers() raised {type(exc).__name__}: {exc}")}}
        def ok(v):
            return callable(v) or (isinstance(v, tuple) and len(v) == 2 and all(map(callable, v)))

        if not isinstance(peers, dict) or not all(isinstance(k, str) and ok(v)
                                                  for k, v in peers.items()):
            return {"peers()": {"skipped": "peers() must return a dict {name: fn(inputs, case)} "
                                "or {name: (prepare, fn)}"}}
        return {name: self._time_peer(case, seeds, iters, warmup, fn)
                for name, fn in sorted(peers.items())}

    def _time_peer(self, case, seeds, iters, warmup, fn) -> dict:
        """One peer: checked once on a copy of fresh inputs (with its peak memory on a GPU),
        then timed. A (prepare, fn) peer gets its arguments from prepare(inputs, case), untimed:
        a layout the peer's users hold anyway (Liger's full-width rope tables)."""
        h, torch = self.h, self.h.torch
        prepare, fn = fn if isinstance(fn, tuple) else (None, fn)
        view = h.buffers.case_view(case)
        sets = [h.buffers.make_inputs(case, view, s) for s in seeds]
        want = h.oracle.reference({k: v.clone() for k, v in sets[0].items()}, view)
        mine = {k: v.clone() for k, v in sets[0].items()}   # a peer may work in place
        cuda = mine and next(iter(mine.values())).device.type == "cuda"
        try:
            if prepare is not None:
                sets = [prepare(s, view) for s in sets]
                mine = prepare(mine, view)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            got = fn(mine, view)
            h.runtime.synchronize()
            memory = torch.cuda.max_memory_allocated() - before if cuda else None
        except ImportError as exc:
            return {"skipped": _one_line(f"not installed ({exc})")}
        except Exception as exc:  # noqa: BLE001 - an unsupported dtype, shape or device
            return {"skipped": _one_line(f"raised {type(exc).__name__}: {exc}")}
        names = [t.name for t in h.spec.signature.outputs]
        missing = [n for n in names if not isinstance((got or {}).get(n), torch.Tensor)]
        if missing:
            return {"skipped": f"returned no tensor for output {missing[0]!r}"}
        shapes = {n: list(got[n].shape) for n in names if list(got[n].shape) != list(want[n].shape)}
        if shapes:
            name = next(iter(shapes))
            return {"skipped": f"returned {name} with shape {shapes[name]}; the spec says "
                    f"{list(want[name].shape)}"}
        res = compare(h.spec, case, {n: got[n] for n in names}, want)
        out = self._time_fn(fn, view, sets, iters, warmup)
        if memory is not None:
            out["memory_bytes"] = int(memory)
        if not res.ok:
            out["mismatch"] = _one_line(res.reason or "")
        return out


def _one_line(text: str, limit: int = 300) -> str:
    first = (text.strip().splitlines() or [""])[0]
    return first if len(first) <= limit else first[:limit - 1] + "…"


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
    if not _floor_is_a_bound(target):
        # host column: the target's bandwidth is an estimate, not an upper bound (a working set
        # that stays in cache beats it), so honest code could fall below it. The host timer is
        # the judge's own round trip of each call and skipped work fails the checked
        # iterations, so no floor is needed there (docs/oracle.md, "Physical floor").
        out["floor_guard"] = "off: no upper bound of the host's bandwidth"
        return None
    # A measured peak (a copy, a cuBLAS GEMM) can be beaten a little by a kernel that only
    # reads, or a better GEMM; a datasheet peak is a hard ceiling. Either way, far below is fake.
    for seconds, term_bound, peak in floor_terms(spec, target, case):
        margin = 0.8 if peak.source == "measured" else 0.9
        if out["median_s"] < seconds * margin:
            return Rejection("physical-floor", f"{out['median_s'] * 1e6:.2f} µs is below the "
                             f"physical floor {seconds * 1e6:.2f} µs ({term_bound}-bound at the "
                             f"{peak.source} peak): impossible, so not real")
    return None


def _floor_is_a_bound(target) -> bool:
    """Whether the target's peaks bound every honest kernel from above: a device's (datasheet or
    measured, whatever the working set), not the host's."""
    from regen.artifact import LANGUAGES

    return LANGUAGES[target.language].on_device
