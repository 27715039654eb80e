"""Time the benchmark cases here against torch eager and torch.compile (% of the roofline floor),
or show the timings in the committed records (--recorded, no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

from . import _common

HELP = "time benchmark cases against torch eager, torch.compile and the oracle's peers"


def add_arguments(parser) -> None:
    _common.add_selection(parser)
    parser.add_argument("--iters", type=int, default=None, metavar="N",
                        help="timed iterations per case (default: the judge's own choice)")
    parser.add_argument("--timeout", type=float, default=900.0, metavar="S",
                        help="seconds per child process")
    parser.add_argument("--export", metavar="FILE", help="write records and the table to FILE")
    parser.add_argument("--case", action="append", default=[], metavar="NAME=V,..",
                        help="time this case instead of the spec's benchmark cases, e.g. "
                             "M=1,N=4096,dtype=bfloat16 (repeatable; checked like the spec's own "
                             "cases, no floor expectation; applies to each kernel it fits)")
    parser.add_argument("--recorded", action="store_true",
                        help="print the timings in the current records instead of timing here "
                             "(no GPU needed)")


def _recorded(nodes, as_json: bool) -> int:
    """The benchmark rows of the records that decide each node (the up-to-date one, or the failed
    or stale one named in its reasons), with where and when they were measured."""
    from .. import plan as planning, report
    from ..profile import GEOMEAN_CASE

    rows, sources, summaries = [], [], []
    for n in nodes:
        rec = n.record
        if not rec or not rec.get("bench"):
            continue
        summaries.extend({"kernel": n.kernel, "target": n.target, **c}
                         for c in rec.get("expectations") or [] if c.get("case") == GEOMEAN_CASE)
        where = planning.verified_where(rec)
        state = "current" if n.action in (planning.UP_TO_DATE, planning.RECOMPILE, planning.FAILED) \
            else f"stale: {'; '.join(n.reasons)}"
        sources.append(f"{n.label}: {where} ({state})")
        rows.extend({"kernel": n.kernel, "target": n.target, **b} for b in rec["bench"])
    if as_json:
        report.bench(rows, True)
        return 0
    if not rows:
        print("no record with benchmark timings")
        return 1
    report.bench(rows, False, summaries=summaries)
    print()
    print("\n".join(sources))
    return 0


def run(args) -> int:
    from .. import build as building, plan as planning, report

    project = _common.project(args)
    ctx = _common.context(args, project)
    ctx.settings = _common.settings(seeds=1, bench=True, iters=args.iters, timeout_s=args.timeout)
    nodes = planning.plan(project, ctx.store, _common.kernels(args), _common.targets(args),
                          intent="build" if args.recorded else "bench")
    if args.recorded:
        return _recorded(nodes, args.json)
    from ..profile import GEOMEAN_CASE

    extra = _command_line_cases(project, nodes, args.case, named=bool(args.kernels))
    rows, summaries = [], []
    results = []
    for n in nodes:
        if n.skip or n.action == planning.UNSUPPORTED:
            continue
        spec = project.spec(n.kernel)
        bench_cases = extra.get(n.kernel, []) if extra else spec.bench_cases(
            project.target(n.target))
        if not bench_cases:
            continue
        r = building.bench_node(ctx, n, bench_cases)
        results.append(r)
        plans = [(r, None)]
        if spec.composition is not None:   # fused and unfused side by side
            fused = not planning.is_composed(n.entry)
            plans = [(r, "fused" if fused else "unfused")]
            if fused:
                plans.append((building.bench_unfused(ctx, n, bench_cases), "unfused"))
        mine = []
        for res, plan_label in plans:
            extra = {"plan": plan_label} if plan_label else {}
            if res.outcome is not None:
                for b in res.outcome.bench:
                    mine.append({"kernel": n.kernel, "target": n.target, **extra, **b})
                summaries.extend({"kernel": n.kernel, "target": n.target, **c}
                                 for c in res.outcome.expectations if c.get("case") == GEOMEAN_CASE)
            if res.status != "ok" and (res.outcome is None or not res.outcome.bench):
                mine.append({"kernel": n.kernel, "target": n.target, **extra, "case": "—",
                             "ok": False, "reason": res.summary})
        _vs_unfused(mine)
        rows.extend(mine)
    report.bench(rows, args.json, summaries=summaries)
    if args.export:
        records = [r.record for r in results if r.record]
        Path(args.export).write_text(json.dumps({"records": records, "bench": rows}, indent=1))
    return 1 if any(r.status != "ok" for r in results) else 0


def _command_line_cases(project, nodes, texts: list[str], named: bool = True) -> dict:
    """kernel -> the --case cases that fit it. Each case must fit a kernel, and each kernel the
    user named must fit a case (unnamed kernels, `regen bench --case ...` over all, that fit
    none are left out)."""
    from ..errors import InputError

    if not texts:
        return {}
    out: dict = {}
    used: set = set()
    for kernel in dict.fromkeys(n.kernel for n in nodes if not n.skip):
        spec, fits, why = project.spec(kernel), [], None
        for text in texts:
            try:
                fits.append(parse_case(spec, text))
                used.add(text)
            except InputError as exc:
                why = why or exc
        if fits:
            out[kernel] = fits
        elif named:
            raise InputError(f"no --case fits {kernel}: {why.detail}", field=why.field)
    unused = [t for t in texts if t not in used]
    if unused:
        raise InputError("fits none of the kernels selected", field=f"--case {unused[0]}")
    return out


def parse_case(spec, text: str):
    """A benchmark case given on the command line ('M=1,N=4096,dtype=bfloat16'), checked by the
    same rules as the spec's own cases. It is latency-bound territory by default (floor: false):
    `regen bench --case` is how one asks "how does it do at my shape" without editing the spec."""
    import re

    from pydantic import ValidationError

    from ..errors import InputError
    from ..spec import Case, Spec

    fields: dict = {"bench": True, "floor": False}
    params = {p.name: p for p in spec.signature.params}
    symbols = spec.signature.symbols()
    where = f"--case {text}"
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise InputError(f"expected NAME=VALUE, got {item!r}", field=where)
        if key in ("dtype", "dist", "name"):
            fields[key] = value
        elif key == "floor":
            fields[key] = value.lower() in ("1", "true", "yes")
        elif key in params:
            try:
                kind = params[key].type
                fields.setdefault("params", {})[key] = (
                    float(value) if kind == "float" else
                    value.lower() in ("1", "true", "yes") if kind == "bool" else int(value))
            except ValueError:
                raise InputError(f"{key}: expected a {params[key].type}, got {value!r}",
                                 field=where) from None
        elif key in symbols:
            try:
                fields[key] = int(value)
            except ValueError:
                raise InputError(f"{key}: expected a non-negative integer, got {value!r}",
                                 field=where) from None
        else:
            raise InputError(f"{spec.name} has no {key!r} (expected its shape symbols "
                             f"{sorted(symbols)}, its parameters {sorted(params)}, dtype, dist or "
                             "name)", field=where)
    try:
        case = Case.model_validate(fields)
        Spec.model_validate({**spec.model_dump(mode="json", exclude_unset=True),
                             "cases": [*spec.model_dump(mode="json", exclude_unset=True)["cases"],
                                       case.model_dump(mode="json", exclude_unset=True)]})
    except ValidationError as exc:
        msgs = "; ".join(str(e.get("msg")) for e in exc.errors())
        raise InputError(re.sub(r"cases\[\d+\]:? ?", "", msgs).removeprefix("Value error, "),
                         field=where) from None
    return case


def _vs_unfused(rows: list[dict]) -> None:
    """A fused row's speedup over the unfused plan's row of the same case."""
    unfused = {r["case"]: r.get("median_s") for r in rows if r.get("plan") == "unfused"}
    for r in rows:
        if r.get("plan") == "fused" and r.get("median_s") and unfused.get(r["case"]):
            r["vs_unfused"] = unfused[r["case"]] / r["median_s"]
