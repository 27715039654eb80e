"""Time candidate implementations of one kernel side by side, before any of them is accepted.

Each DIR holds what `regen handoff` writes (the kernel source + launch.yaml; launch.yaml alone
reuses the committed source: regen/variant.py); the word `committed`
stands for the implementation cache/ holds for the kernel and target. Every candidate goes
through the same path as `regen verify`: compile, resource checks, a child-process worker that
checks the outputs of the benchmark cases and times them (L2 flushed, launch overhead kept out of
the device timer). No baselines are timed, so a comparison of five variants takes seconds.

    python benchmarks/variants.py rmsnorm --target h200 committed /tmp/v1 /tmp/v2
    python benchmarks/variants.py rmsnorm -t h200 --case M=1,N=4096,dtype=bfloat16 committed /tmp/v1

--case (repeatable, the syntax of `regen bench --case`) times those cases instead of the spec's
benchmark cases (latency-bound territory: no floor expectation unless the case says floor=true).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from regen.build import Context, evaluate  # noqa: E402
from regen.project import Project, find_root
from regen import variant
from regen.errors import InputError
from regen.store import Store
from regen.judge import Settings


def _candidate(store: Store, kernel: str, target: str, folder: Path) -> tuple[str, str, str] | str:
    """(source file name, source, recipe) of one candidate, or why there is none."""
    if str(folder) == "committed" and not folder.is_dir():
        entry = store.current(kernel, target)
        if entry is None:
            return f"cache/ has no committed implementation of {kernel}@{target}"
        return entry.source_name, entry.source(), entry.recipe()
    try:
        return variant.read(folder, store, kernel, target)
    except InputError as exc:
        return str(exc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernel")
    ap.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                    help="a candidate folder, or `committed` for the implementation in cache/")
    ap.add_argument("--target", "-t", required=True)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--case", action="append", default=[], metavar="NAME=V,..",
                    help="time this case instead of the spec's benchmark cases, e.g. "
                         "M=1,N=4096,dtype=bfloat16 (repeatable; as `regen bench --case`)")
    ap.add_argument("--pick-into", type=Path, metavar="DIR",
                    help="copy the source and launch.yaml of the fastest passing candidate (by its "
                         "slowest benchmark case, as a fraction of the floor) into DIR")
    args = ap.parse_args()
    project = Project(find_root(None))
    spec, target = project.spec(args.kernel), project.target(args.target)
    settings = Settings(seeds=1, bench=True, iters=args.iters, baselines=(), timeout_s=300)
    ctx = Context(project, Store(project.cache_dir), settings=settings)
    if args.case:
        from regen.commands.bench import parse_case
        from regen.errors import InputError
        try:
            cases = [parse_case(spec, text) for text in args.case]
        except InputError as exc:
            print(f"error: {exc}")
            return 2
    else:
        cases = spec.bench_cases(target)
    if not cases:
        print(f"specs/{args.kernel}.yaml has no bench case for {args.target}: nothing to time")
        return 2
    failed, scores = 0, {}
    for folder in args.dirs:
        candidate = _candidate(ctx.store, args.kernel, args.target, folder)
        if isinstance(candidate, str):
            print(f"{folder}: {candidate}")
            failed += 1
            continue
        source_name, source_text, recipe_text = candidate
        ev = evaluate(ctx, spec, target, source_text, recipe_text, True, settings,
                      cases=cases)
        stage, ok, feedback, outcome = ev.stage, ev.ok, ev.feedback, ev.outcome
        if outcome is None or not outcome.bench:
            print(f"{folder}: {stage} {'ok' if ok else 'FAILED'}: {str(feedback)[:400]}")
            failed += not ok
            continue
        for row in outcome.bench:
            frac = row.get("floor_fraction")
            print(f"{folder}: {row['case']}: {row.get('median_s', 0) * 1e6:8.1f} us"
                  + (f"  {frac:6.1%} of floor" if frac else "")
                  + f"  spread {row.get('spread', 0):.1%}"
                  + ("" if row.get("ok") else f"  FAILED: {row.get('reason')}"))
        if not ok:
            print(f"{folder}: FAILED: {str(feedback)[:400]}")
            failed += 1
        elif all(r.get("floor_fraction") for r in outcome.bench):
            scores[folder] = (min(r["floor_fraction"] for r in outcome.bench), candidate)
    if args.pick_into is not None:
        if not scores:
            print("no candidate passed: nothing picked")
            return 1
        best = max(scores, key=lambda f: scores[f][0])
        source_name, source_text, recipe_text = scores[best][1]
        args.pick_into.mkdir(parents=True, exist_ok=True)
        (args.pick_into / source_name).write_text(source_text)
        (args.pick_into / "launch.yaml").write_text(recipe_text)
        print(f"picked {best} ({scores[best][0]:.1%} of floor, slowest case) into {args.pick_into}")
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
