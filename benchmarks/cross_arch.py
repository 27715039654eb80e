"""Run another column's committed CUDA source on this machine's GPU against the oracle: evidence
about device code whose own hardware is not at hand (attention@b200's mma.sync, ldmatrix and
cp.async kernels run unchanged on sm_90a). The source of KERNEL@FROM is compiled for --target's
arch (NVRTC) and verified by the judge on every case of the spec, hidden variants included, and
the benchmark cases are timed. FROM's profile expectations and the target's instruction checks
are not applied (they describe other artifacts), and nothing is recorded: a record would name
this column's hardware for a binary that is not this column's artifact.

    python benchmarks/cross_arch.py attention --from b200 --target h200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from regen.build import Context  # noqa: E402
from regen.judge import Settings  # noqa: E402
from regen.project import Project, find_root  # noqa: E402
from regen.store import Store  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernel")
    ap.add_argument("--from", dest="source_target", required=True,
                    help="the column whose committed implementation runs (e.g. b200)")
    ap.add_argument("--target", "-t", required=True, help="the column of this machine's GPU")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    project = Project(find_root(None))
    spec, target = project.spec(args.kernel), project.target(args.target)
    store = Store(project.cache_dir)
    entry = store.current(args.kernel, args.source_target)
    if entry is None:
        print(f"cache/ has no committed implementation of {args.kernel}@{args.source_target}")
        return 1
    if entry.language != target.language:
        print(f"{args.kernel}@{args.source_target} is {entry.language}; {args.target} runs "
              f"{target.language}")
        return 1
    settings = Settings(seeds=args.seeds, bench=True, iters=args.iters, baselines=(),
                        timeout_s=args.timeout)
    ctx = Context(project, store, settings=settings)
    compiled = ctx.executor.compile(entry.source(), target)
    label = f"{args.kernel}@{args.source_target} compiled for {target.arch}"
    if not compiled.result.ok:
        print(f"{label}: compile FAILED\n{compiled.result.log[-4000:]}")
        return 1
    for kernel, res in sorted(compiled.result.resources.items()):
        print(f"{label}: {kernel}: {res.get('registers')} registers, "
              f"{res.get('spill_bytes', 0)} spill bytes")
    outcome = ctx.executor.verify(ctx, spec, target, entry.recipe(), compiled.result.binary,
                                  settings, composition=project.oracle_job(spec))
    for case in outcome.cases:
        print(f"{label}: {case.get('case')}: {'ok' if case.get('ok', True) else 'FAILED'}"
              f"  max_abs {case.get('max_abs')}")
    for row in outcome.bench:
        frac = row.get("floor_fraction")
        print(f"{label}: bench {row['case']}: {row.get('median_s', 0) * 1e6:9.1f} us"
              + (f"  {frac:6.1%} of the floor" if frac else "")
              + ("" if row.get("ok", True) else f"  FAILED: {row.get('reason')}"))
    print(f"{label}: {'passed' if outcome.ok else 'FAILED: ' + str(outcome.reason)} "
          "(not recorded: evidence only)")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
