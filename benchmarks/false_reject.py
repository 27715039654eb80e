"""False rejections of the oracle: honest implementations verified over many fresh seeds.

Every committed CPU implementation (cache/<kernel>/cpu, read through regen's Store) is compiled
and verified, in one worker process per kernel, on each of its spec's correctness cases with N
fresh seeds (each (case, seed) pair is its own entry, so every failure is counted, not only the
first), with every guard of regen/judge/ active and, with --hidden, a
hidden variant per entry (each with its own size step; one that lands on a listed shape is left
out). The claim: 0 false rejections. Cost on the shared 2-core dev machine: about 0.05-0.7 s per
(case, seed), so the default 1000 seeds over every case of every kernel is hours; --max-elements
trims the big cases.

    python benchmarks/false_reject.py [--seeds 1000] [--kernels softmax,rmsnorm] [--hidden]
                                      [--max-elements 0] [--timeout 36000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def honest_implementations(kernels: list[str] | None) -> list[tuple[str, str, str]]:
    """(kernel, source, recipe) of every committed cpu implementation (those named, if any)."""
    from regen.store import Store

    store = Store(REPO / "cache")
    found = []
    for kernel in sorted(p.stem for p in (REPO / "specs").glob("*.yaml")):
        entry = store.current(kernel, "cpu")
        if entry is not None and (not kernels or kernel in kernels):
            found.append((kernel, entry.source(), entry.recipe()))
    return found


def elements(spec, case) -> int:
    total = 0
    for t in spec.signature.tensors:
        n = 1
        for d in spec.tensor_shape(t, case):
            n *= d
        total += n
    return total


def run_kernel(project, kernel: str, source: str, recipe: str, seeds: int, hidden: bool,
               max_elements: int, timeout_s: float) -> dict:
    from regen.compile import compile_source
    from regen.judge import Settings, run

    spec, target = project.spec(kernel), project.target("cpu")
    compiled = compile_source(source, target)
    if not compiled.result.ok:
        return {"kernel": kernel, "error": "compile failed: " + compiled.result.log[-500:]}
    cases = [c for c in spec.correctness_cases()
             if not max_elements or elements(spec, c) <= max_elements]
    # one copy of each case per seed: the worker verifies every (case, seed) and reports each
    entries = [c for c in cases for _ in range(seeds)]
    settings = Settings(seeds=1, hidden_cases=hidden, timeout_s=timeout_s)
    t0 = time.perf_counter()
    outcome = run(spec, target, project.oracle_path(kernel), recipe, compiled.result.binary, settings,
                  cases=entries)
    wall = time.perf_counter() - t0
    failed = [c for c in outcome.cases if c.get("ok") is False]
    verified = len(outcome.cases)
    if not outcome.cases and not outcome.ok:  # the run as a whole was refused (crash, guard)
        failed, verified = [{"case": "*", "reason": outcome.reason}], 0
    elif not outcome.ok and not failed:       # a run-level guard (e.g. degenerate oracle)
        failed = [{"case": "*", "reason": outcome.reason}]
    hidden_n = sum(1 for c in outcome.cases if str(c.get("case", "")).startswith("hidden"))
    return {"kernel": kernel, "cases": len(cases), "seeds": seeds, "verified": verified,
            "hidden": hidden_n, "false_rejections": len(failed),
            "examples": [f"{f['case']}: {f.get('reason')}" for f in failed[:3]], "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000, help="fresh seeds per case (default 1000)")
    parser.add_argument("--kernels", default="",
                        help="comma-separated kernels (default: every committed cpu one)")
    parser.add_argument("--hidden", action="store_true", help="add a hidden-size variant per entry")
    parser.add_argument("--max-elements", type=int, default=0,
                        help="skip cases with more tensor elements than this (0: none skipped)")
    parser.add_argument("--timeout", type=float, default=36000.0, help="seconds per kernel")
    args = parser.parse_args(argv)

    from regen.project import Project

    project = Project(REPO)
    impls = honest_implementations([k for k in args.kernels.split(",") if k] or None)
    if not impls:
        print("no honest implementations found (no committed cpu entry in cache/)")
        return 2
    total_fail = total_verified = 0
    t0 = time.perf_counter()
    for kernel, source, recipe in impls:
        r = run_kernel(project, kernel, source, recipe, args.seeds, args.hidden, args.max_elements,
                       args.timeout)
        if "error" in r:
            print(f"{kernel:14s} ERROR {r['error']}")
            total_fail += 1
            continue
        total_fail += r["false_rejections"]
        total_verified += r["verified"]
        print(f"{kernel:14s} {r['cases']:3d} cases x {r['seeds']} seeds: {r['verified']} verified "
              f"({r['hidden']} of them hidden variants), {r['false_rejections']} false rejections, "
              f"{r['wall_s']:.1f} s", flush=True)
        for ex in r["examples"]:
            print(f"    {ex[:300]}")
    wall = time.perf_counter() - t0
    print(f"total: {total_verified} (case, seed) verifications, {total_fail} false rejections, "
          f"{wall:.1f} s wall")
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
