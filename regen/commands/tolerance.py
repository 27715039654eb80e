"""Do a spec's tolerances fit the math? The oracle's torch baseline and a naive float32
implementation against the reference on every case, before the spec ships."""

from __future__ import annotations

import json

from . import _common

HELP = ("check a spec's tolerances against its torch baseline and a naive float32 "
        "implementation (exit 1 when the float32 one does not fit)")


def add_arguments(parser) -> None:
    parser.add_argument("kernel", help="the spec to check (specs/KERNEL.yaml)")
    parser.add_argument("--seeds", type=int, default=3, metavar="N",
                        help="seeds per case (default: 3)")
    parser.add_argument("--bench", action="store_true",
                        help="include the benchmark cases (large; default: correctness cases only)")
    parser.add_argument("--device", default="cpu",
                        help="torch device the implementations run on (default: cpu)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    import random

    from ..errors import InputError
    from ..judge.fit import composed_agreement, fit
    from ..oracle import ComposedOracle, load_oracle

    if args.seeds < 1:
        raise InputError(f"expected at least one seed, got {args.seeds}", field="--seeds")
    project = _common.project(args)
    spec = project.spec(args.kernel)
    project.oracle_digest(args.kernel)  # the static checks: contract, distributions
    oracle = load_oracle(project.oracle_path(args.kernel))
    job = project.oracle_job(spec)
    if job is not None:  # a composed spec: the reference is composed from its components'
        oracle = ComposedOracle(oracle, job)
    cases = [c for c in spec.cases if args.bench or not c.bench]
    rng = random.SystemRandom()
    seeds = [rng.randrange(2**31) for _ in range(args.seeds)]
    rows = fit(spec, oracle, cases, seeds, args.device)
    disagree = composed_agreement(spec, oracle, cases, seeds, args.device) if job else []
    naive_bad = [r for r in rows if not r.implementations["naive float32"].fits]
    base_bad = [r for r in rows if "baseline" in r.implementations
                and not r.implementations["baseline"].fits]
    if args.json:
        print(json.dumps({"kernel": spec.name, "seeds": seeds, "cases": [
            {"case": r.case, "dtype": r.dtype, "bound": r.bound,
             **{name: {"fits": f.fits, "ratio": f.ratio, "where": f.where, "max_abs": f.max_abs,
                       "max_rel": f.max_rel, "error": f.error}
                for name, f in r.implementations.items()}} for r in rows],
            "composed_reference_disagrees": disagree}, indent=1))
        return 1 if naive_bad or disagree else 0
    names = list(rows[0].implementations) if rows else []
    width = max([len(r.case) for r in rows] + [4])
    print(f"{spec.name}: error / allowed bound (<= 1 fits), worst over seeds {seeds}")
    print(f"{'case':<{width}}  {'dtype':<8}  " + "  ".join(f"{n:>14}" for n in names) + "  bound")
    for r in rows:
        cells = [_cell(r.implementations[n]) for n in names]
        print(f"{r.case:<{width}}  {r.dtype:<8}  " + "  ".join(f"{c:>14}" for c in cells)
              + f"  {r.bound}")
    for r in naive_bad:
        f = r.implementations["naive float32"]
        why = f.error or f"{f.ratio:.3g}x the bound at {f.where}, max rel {f.max_rel:.3g}"
        print(f"{r.case}: naive float32 does not fit ({why}): the tolerance is tighter than "
              "float32 arithmetic allows")
    if base_bad:
        print(f"the baseline does not fit {len(base_bad)} of {len(rows)} cases "
              f"({', '.join(r.case for r in base_bad[:4])}{', ...' if len(base_bad) > 4 else ''}): "
              "fine if the spec asks for more than arithmetic in the storage dtype")
    if job is not None and oracle.written is not None:
        for line in disagree:
            print(f"{line}: fix the component oracle or this reference()")
        print(f"the hand-written reference() agrees with the one composed from "
              f"{', '.join(spec.composition.kernels())} on every case" if not disagree else
              f"FAIL: the hand-written reference() disagrees with the composed one on "
              f"{len(disagree)} case(s)")
    elif job is not None:
        print(f"reference: composed from {', '.join(spec.composition.kernels())} "
              f"({len(spec.composition.steps)} steps)")
    print("ok: naive float32 fits every case" if not naive_bad
          else f"FAIL: naive float32 does not fit {len(naive_bad)} case(s)")
    return 1 if naive_bad or disagree else 0


def _cell(f) -> str:
    if f.error:
        return "error"
    return f"{f.ratio:.3g}" + ("" if f.fits else " NO")
