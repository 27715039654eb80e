"""Scale of the fleet, simulated: time to green for a synthetic project of 2,000 specs x 8 targets on
a fleet of N verification workers per column, for a cold build and for a one-spec edit, and where
the driver (planning, cache I/O, compiling) becomes the bottleneck.

What is measured here, on this repository and this machine, before the simulation runs:
  planning    regen.plan.plan() over the repository's kernels x targets: seconds per node
  compile     the real compile stage (no local cache) on committed entries: g++ for the host
              column, NVRTC for the NVIDIA columns (every launch variant of the entry)
  cache I/O   pushing every node of the repository's cache to a file:// remote cache and pulling
              it into an empty checkout (regen/remote/): seconds per node, each way
What is assumed (flags change them): the LLM's latency per candidate (log-normal), candidates per
generation, the share of generations that find nothing, verification time per column (the host
column's default is what this session's Ray test measured on 2 cores; GPU columns' is a guess
until the H200 run measures it), LLM concurrency, the driver's compile slots.

The model follows regen's Ray executor: the driver plans every node, pulls, then per family
generation runs a search (LLM call -> compile task -> verification on a worker of the leading
column, repeated per candidate); the family's other members compile and verify on their own
columns; each finished node is pushed by the driver (one push at a time: Sync holds a lock).
Compile tasks run on any worker (or, with --compile-on driver, on the driver's cores only).

    python benchmarks/fleet_sim.py [--workers 1,2,4,8,16,32,64] [--specs 2000] [--no-measure]
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# 8 targets, 5 generation families (as in targets/: sm90 and cdna share a generation)
FAMILIES = {"a100": ["a100"], "sm90": ["h100", "h200"], "b200": ["b200"],
            "cdna": ["mi300x", "mi350", "mi355x"], "cpu": ["cpu"]}
TOOLCHAIN = {"a100": "nvrtc", "h100": "nvrtc", "h200": "nvrtc", "b200": "nvrtc",
             "mi300x": "hip", "mi350": "hip", "mi355x": "hip", "cpu": "cxx"}


# -- measurements ------------------------------------------------------------------------------
def measure(samples: int = 3) -> dict:
    """Per-node planning, compile per toolchain and cache push/pull, measured on this repository."""
    os.environ.setdefault("REGEN_LOCAL_CACHE", tempfile.mkdtemp(prefix="fleet-sim-lc-"))
    from regen import plan as planning
    from regen.compile import compile_source, toolchain_problem
    from regen.project import Project
    from regen.store import Store

    out = {}
    project, store = Project(ROOT), Store(ROOT / "cache")
    planning.plan(project, store)                     # warm: oracle digests memoised, as in CI
    t = time.perf_counter()
    nodes = planning.plan(project, store)
    out["plan_s"] = (time.perf_counter() - t) / len(nodes)
    out["nodes_measured"] = len(nodes)
    for tc, target in (("cxx", "cpu"), ("nvrtc", "h200")):
        tgt = project.target(target)
        if toolchain_problem(tgt):
            continue
        times = []
        for k in project.kernel_names()[:samples]:
            entry = store.current(k, target)
            if entry is not None:
                res = compile_source(entry.source(), tgt, use_cache=False).result
                if res.ok:
                    times.append(res.seconds)
        if times:
            out[f"compile_{tc}_s"] = statistics.mean(times)
    try:
        out.update(_measure_cache_io(project, store))
    except Exception as exc:  # noqa: BLE001 - fsspec missing: the defaults stand
        print(f"(cache I/O not measured: {exc})", file=sys.stderr)
    return out


def _measure_cache_io(project, store) -> dict:
    from regen.project import Project
    from regen.remote.config import RemoteConfig
    from regen.remote.sync import Sync
    from regen.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="fleet-sim-"))
    try:
        sync = Sync(RemoteConfig(f"file://{tmp / 'remote'}", pushed_by="sim"))
        pairs = [(s.name, t.name) for s, t in project.pairs() if store.current(s.name, t.name)]
        t = time.perf_counter()
        for k, tg in pairs:
            sync.push(project, store, k, tg)
        push = (time.perf_counter() - t) / len(pairs)
        clone = tmp / "clone"
        for name in ("specs", "oracles", "targets"):
            shutil.copytree(ROOT / name, clone / name)
        other = Project(clone)
        t = time.perf_counter()
        got = Sync(RemoteConfig(f"file://{tmp / 'remote'}")).pull(other, Store(other.cache_dir))
        pull = (time.perf_counter() - t) / len(pairs)
        t = time.perf_counter()                       # again: nothing new, what an edit pays
        Sync(RemoteConfig(f"file://{tmp / 'remote'}")).pull(other, Store(other.cache_dir))
        warm = (time.perf_counter() - t) / len(pairs)
        assert got.entries and got.records, got.line("pulled")
        return {"push_s": push, "pull_s": pull, "pull_warm_s": warm}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- a small discrete-event simulator -----------------------------------------------------------
class Sim:
    """Processes are generators yielding (pool, seconds): wait for a slot of the pool, hold it
    for that long. Pools serve first come, first served."""

    def __init__(self, pools: dict[str, int]):
        self.now, self.events, self.seq = 0.0, [], 0
        self.free = dict(pools)
        self.waiting = {p: deque() for p in pools}
        self.busy = dict.fromkeys(pools, 0.0)

    def _at(self, t, fn):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn))

    def start(self, proc, then=None):
        self._step(proc, then, None)

    def _step(self, proc, then, release):
        if release is not None:
            self._release(release)
        try:
            pool, dur = next(proc)
        except StopIteration:
            if then:
                then()
            return
        self._acquire(pool, dur, proc, then)

    def _acquire(self, pool, dur, proc, then):
        if self.free[pool] > 0:
            self.free[pool] -= 1
            self.busy[pool] += dur
            self._at(self.now + dur, lambda: self._step(proc, then, pool))
        else:
            self.waiting[pool].append((dur, proc, then))

    def _release(self, pool):
        self.free[pool] += 1
        if self.waiting[pool]:
            dur, proc, then = self.waiting[pool].popleft()
            self._acquire(pool, dur, proc, then)

    def run(self) -> float:
        while self.events:
            self.now, _, fn = heapq.heappop(self.events)
            fn()
        return self.now


def simulate(n_specs: int, edited: int, workers: int, m: dict, a, seed: int = 0) -> dict:
    """Time to green of a build where `edited` specs need generation (all nodes are planned)."""
    rng = random.Random(seed)
    columns = [t for ts in FAMILIES.values() for t in ts]
    compile_slots = a.compile_slots + (workers * len(columns) if a.compile_on == "workers" else 0)
    pools = {"driver": 1, "compile": compile_slots, "llm": a.llm_concurrency,
             **{f"verify:{c}": workers for c in columns}}
    sim = Sim(pools)
    n_nodes = n_specs * len(columns)
    # planning and pulling: the driver, before anything runs
    t0 = n_nodes * (m["plan_s"] + (m["pull_s"] if edited == n_specs else m["pull_warm_s"]))
    done = {"nodes": 0}

    def verify_s(col):
        base = a.verify_cpu_s if col == "cpu" else a.verify_gpu_s
        return base * rng.uniform(0.7, 1.3)

    def compile_s(col):
        return m.get(f"compile_{TOOLCHAIN[col]}_s", m["compile_nvrtc_s"]) * rng.uniform(0.8, 1.2)

    def node(col):                          # a family member: compile, verify, push
        yield "compile", compile_s(col)
        yield f"verify:{col}", verify_s(col)
        yield "driver", m["push_s"]

    def generation(members):
        lead = members[0]
        found = rng.random() >= a.fail_rate
        n = min(a.max_candidates, 1 + int(rng.expovariate(1 / (a.candidates - 1)))) if found \
            else a.max_candidates
        for _ in range(n):
            yield "llm", rng.lognormvariate(*_lognorm(a.llm_median_s, a.llm_p90_s))
            yield "compile", compile_s(lead)
            yield f"verify:{lead}", verify_s(lead)
        yield "driver", m["push_s"]

    def finish():
        done["nodes"] += 1

    def start_all():
        for _ in range(edited):
            for members in FAMILIES.values():
                def after(members=members):
                    finish()
                    for col in members[1:]:
                        sim.start(node(col), finish)
                sim.start(generation(members), after)

    sim._at(t0, start_all)
    end = sim.run()
    span = end - t0 if end > t0 else 1.0
    driver_busy = t0 + sim.busy["driver"] + \
        (sim.busy["compile"] / a.compile_slots if a.compile_on == "driver" else 0.0)
    util = {p: sim.busy[p] / (span * pools[p]) for p in pools}
    verify_util = max(v for p, v in util.items() if p.startswith("verify:"))
    return {"time_s": end, "plan_pull_s": t0, "driver_util": driver_busy / end,
            "compile_util": util["compile"], "llm_util": util["llm"], "verify_util": verify_util,
            "nodes": done["nodes"]}


def _lognorm(median: float, p90: float) -> tuple[float, float]:
    import math

    mu = math.log(median)
    return mu, (math.log(p90) - mu) / 1.2816


def bottleneck(r: dict) -> str:
    busiest = max(("verify workers", r["verify_util"]), ("LLM concurrency", r["llm_util"]),
                  ("compile slots", r["compile_util"]),
                  ("driver (plan, pull, push; compile with --compile-on driver)", r["driver_util"]),
                  key=lambda kv: kv[1])
    return f"{busiest[0]} ({busiest[1] * 100:.0f}%)"


def _fmt(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--specs", type=int, default=2000)
    ap.add_argument("--workers", default="1,2,4,8,16,32,64", help="workers per column")
    ap.add_argument("--no-measure", action="store_true", help="use the defaults below only")
    ap.add_argument("--llm-median-s", type=float, default=45.0)
    ap.add_argument("--llm-p90-s", type=float, default=120.0)
    ap.add_argument("--candidates", type=float, default=2.5, help="mean candidates per generation")
    ap.add_argument("--max-candidates", type=int, default=8)
    ap.add_argument("--fail-rate", type=float, default=0.05,
                    help="generations where no candidate passes (all candidates spent)")
    ap.add_argument("--verify-cpu-s", type=float, default=30.0,
                    help="host column: this session's Ray test measured 22-38 s per node")
    ap.add_argument("--verify-gpu-s", type=float, default=20.0, help="GPU columns (assumed)")
    ap.add_argument("--llm-concurrency", type=int, default=64)
    ap.add_argument("--compile-slots", type=int, default=16, help="the driver's cores")
    ap.add_argument("--compile-on", choices=("workers", "driver"), default="workers",
                    help="where compile tasks run (--executor ray: any worker, one slot each)")
    a = ap.parse_args(argv)
    m = {"plan_s": 0.004, "compile_cxx_s": 0.5, "compile_nvrtc_s": 3.0, "compile_hip_s": 3.0,
         "push_s": 0.03, "pull_s": 0.03, "pull_warm_s": 0.01}
    if not a.no_measure:
        measured = measure()
        m.update(measured)
        m.setdefault("compile_hip_s", m["compile_nvrtc_s"])
        print("measured on this repository: " + ", ".join(
            f"{k} {v * 1000:.1f} ms" if k.endswith("_s") else f"{k} {v}"
            for k, v in measured.items()))
    print(f"assumed: LLM median {a.llm_median_s:g} s (p90 {a.llm_p90_s:g} s), {a.candidates:g} "
          f"candidates per generation (max {a.max_candidates}), {a.fail_rate:.0%} find nothing, "
          f"verification {a.verify_cpu_s:g} s host / {a.verify_gpu_s:g} s GPU, "
          f"{a.llm_concurrency} LLM calls at once, compile on {a.compile_on}")
    n_nodes = a.specs * 8
    print(f"\n{a.specs} specs x 8 targets = {n_nodes} nodes, {a.specs * len(FAMILIES)} generations"
          f"; driver per node: plan {m['plan_s'] * 1000:.1f} ms, pull {m['pull_s'] * 1000:.1f} ms "
          f"(nothing new: {m['pull_warm_s'] * 1000:.1f} ms), push {m['push_s'] * 1000:.1f} ms: "
          f"{(m['plan_s'] + m['pull_s'] + m['push_s']) * n_nodes / 60:.0f} min of driver time for "
          f"a cold build, {(m['plan_s'] + m['pull_warm_s']) * n_nodes / 60:.1f} min before an "
          "edit's first LLM call\n")
    rows = [("N/column", "cold build", "busiest (cold)", "driver busy (cold)", "one-spec edit",
             "of which plan+pull")]
    for n in [int(x) for x in a.workers.split(",")]:
        cold = simulate(a.specs, a.specs, n, m, a)
        edit = simulate(a.specs, 1, n, m, a)
        rows.append((str(n), _fmt(cold["time_s"]), bottleneck(cold),
                     f"{cold['driver_util'] * 100:.0f}%", _fmt(edit["time_s"]),
                     _fmt(edit["plan_pull_s"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return 0


if __name__ == "__main__":
    sys.exit(main())
