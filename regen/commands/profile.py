"""A kernel's timeline on this machine's hardware: the instrumented build (REGEN_TIMELINE) of the
current artifact run once on one case in the judge's child process, its records drawn as a per-SM
Gantt chart (regen/timeline.py). The verified binary is never the instrumented one."""

from __future__ import annotations

import sys

from . import _common

HELP = "draw a kernel's per-SM timeline (its instrumented build, run here) as a Gantt chart"


def add_arguments(parser) -> None:
    parser.add_argument("kernel", nargs="?", help="the kernel (a spec name in specs/)")
    parser.add_argument("--target", "-t", help="the target column (a name in targets/)")
    parser.add_argument("--timeline", metavar="OUT.png",
                        help="draw the per-SM Gantt chart to this file (needs matplotlib)")
    parser.add_argument("--json", dest="json_out", metavar="OUT.json",
                        help="write the records (and a summary) as JSON")
    parser.add_argument("--case", metavar="NAME",
                        help="the case to run, by name or label (default: the first benchmark "
                             "case of the column, else the first case)")
    parser.add_argument("--runs", type=int, default=2, metavar="N",
                        help="launches on fresh outputs; the last one's records are read, "
                             "caches flushed before it (default: 2)")
    parser.add_argument("--seed", type=int, default=0, help="input seed (default: 0)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S",
                        help="seconds for the child process (default: 600.0)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--entry", metavar="ID",
                       help="profile this cache entry of the kernel (e.g. one pending "
                            "verification on this hardware) instead of the column's current one")
    which.add_argument("--variant", metavar="DIR",
                       help="profile the candidate in DIR (the source and launch.yaml, as "
                            "`regen handoff` writes them) instead of the column's current entry")
    parser.add_argument("--render", metavar="FILE.json",
                        help="draw a timeline written earlier with --json (no hardware needed)")


def _fail(message: str, code: int = 2) -> int:
    print(f"regen profile: {message}", file=sys.stderr)
    return code


def run(args) -> int:
    from .. import timeline as tl

    if args.timeline and tl.matplotlib_problem():
        return _fail(tl.matplotlib_problem())
    if args.render:
        return _render(args, tl)
    if not args.kernel or not args.target:
        return _fail("give KERNEL and --target T (or --render FILE.json)")
    if not args.timeline and not args.json_out:
        return _fail("nothing to write: give --timeline OUT.png and/or --json OUT.json")
    return _profile(args, tl)


def _render(args, tl) -> int:
    import json

    if not args.timeline:
        return _fail("--render draws a chart: give --timeline OUT.png")
    try:
        with open(args.render) as f:
            events, ops, meta = tl.from_json(json.load(f))
    except (OSError, ValueError) as exc:
        return _fail(f"{args.render}: {exc}")
    tl.render(events, ops, args.timeline, _title(meta))
    print(f"drew {len(events)} intervals to {args.timeline}")
    return 0


def _title(meta: dict) -> str:
    return f"{meta.get('kernel')}@{meta.get('target')} {meta.get('case')} on {meta.get('device')}"


def _pick_artifact(args, store, spec, target, source_name: str):
    """(source, recipe text, what the JSON says it is, how messages name it) of the artifact to
    profile: the column's current entry, another entry of the kernel (--entry), or a candidate
    folder (--variant); an exit code when there is none."""
    from pathlib import Path

    if args.variant:
        folder = Path(args.variant)
        source, recipe = folder / source_name, folder / "launch.yaml"
        for f in (source, recipe):
            if not f.is_file():
                return _fail(f"--variant {folder}: no {f.name} there (a folder as `regen "
                             f"handoff` writes it: {source_name} and launch.yaml)")
        return source.read_text(), recipe.read_text(), {"variant": str(folder)}, f"{folder}"
    if args.entry:
        entry = store.entry(spec.name, args.entry)
        if entry is None:
            known = ", ".join(e.id for e in store.entries(spec.name)) or "none"
            return _fail(f"--entry {args.entry}: no such cache entry of {spec.name} "
                         f"(entries: {known})")
        if entry.language != target.language:
            return _fail(f"--entry {entry.id}: a {entry.language} artifact (family "
                         f"{entry.family or '-'}); {target.name} runs {target.language}")
    else:
        entry = store.current(spec.name, target.name)
        if entry is None:
            return _fail(f"{spec.name}@{target.name} has no artifact in cache/ (regen build "
                         "first)", 1)
    return entry.source(), entry.recipe(), {"entry": entry.id}, f"cache entry {entry.id}"


def _pick_case(spec, target, name: str | None):
    cases = spec.cases_for(target)
    dtype0 = spec.signature.dtypes[0]
    if name is not None:
        for c in cases:
            if name in (c.name, c.label(dtype0)):
                return c
        labels = ", ".join(c.label(dtype0) for c in cases)
        raise LookupError(f"--case {name!r}: no case of {spec.name} on {target.name} has that "
                          f"name or label (cases: {labels})")
    bench = [c for c in cases if c.bench]
    return bench[0] if bench else cases[0]


def _profile(args, tl) -> int:
    from .. import hardware
    from ..artifact import LANGUAGES
    from ..compile import compile_source, toolchain_problem
    from ..judge.parent import HOST_BENCH_BYTES, same_regime, timeline
    from ..recipe import parse_recipe

    project = _common.project(args)
    store = _common.store(project)
    spec, target = project.spec(args.kernel), project.target(args.target)
    picked = _pick_artifact(args, store, spec, target, LANGUAGES[target.language].source_name)
    if isinstance(picked, int):
        return picked
    source, recipe_text, origin, where = picked
    recipe = parse_recipe(recipe_text, f"{where} launch.yaml")
    if recipe.timeline is None:
        return _fail(f"{where} ({spec.name}@{target.name}) launch.yaml: no "
                     "`timeline:`; the kernel declares no timeline buffer (the instrumentation "
                     "contract: docs/formats.md)")
    here = hardware.local(target)
    if here is None:
        need = " or ".join(target.hardware.match) or target.name
        return _fail(f"{target.name}: no such hardware here (needs {need}); run it on that "
                     f"machine (benchmarks/h200_run.sh profile:{spec.name}) and draw the JSON "
                     "here with --render", 1)
    problem = toolchain_problem(target)
    if problem:
        return _fail(f"cannot compile for {target.name} here: {problem}", 1)
    try:
        case = _pick_case(spec, target, args.case)
    except LookupError as exc:
        return _fail(str(exc))
    dtype0 = spec.signature.dtypes[0]
    if not LANGUAGES[target.language].on_device:   # the host: a case of the size the judge checks
        case = same_regime(spec, recipe_text, case, HOST_BENCH_BYTES * 8, "profile")
    compiled = compile_source(tl.instrumented(source), target)
    if not compiled.result.ok:
        return _fail(f"the instrumented build does not compile:\n{compiled.result.log[-4000:]}", 1)
    data = timeline(spec, target, project.oracle_path(spec.name), recipe_text,
                    compiled.result.binary, case, args.seed, runs=args.runs,
                    timeout_s=args.timeout, composition=project.oracle_job(spec))
    if "timeline" not in data:
        why = data.get("error") or (data.get("rejected") or {}).get("reason") or data
        return _fail(f"the instrumented run failed: {why}", 1)
    got = data["timeline"]
    try:
        events = tl.decode(got["words"], recipe.timeline.ops)
    except tl.TimelineError as exc:
        return _fail(f"{spec.name}@{target.name}: {exc}", 1)
    device = (got.get("fingerprint") or {}).get("device") or here.get("device")
    meta = {"kernel": spec.name, "target": target.name, "case": case.label(dtype0),
            "seed": got["seed"], "device": device, **origin,
            "instrumented_binary": compiled.binary_digest, "launches": got.get("launches"),
            "outputs": got["check"]}
    s = tl.summary(events, recipe.timeline.ops)
    print(f"{spec.name}@{target.name} {case.label(dtype0)} on {device}: "
          + (f"{s['events']} intervals on {s['sms']} SMs over {s['span_us']:.1f} µs "
             f"({100 * s['busy_fraction']:.0f} % busy)" if events else "no records"))
    for name, o in s.get("ops", {}).items():
        print(f"  {name:<12} {o['count']:>6} x  busy {o['busy_us']:10.1f} µs  "
              f"from {o['first_us']:9.1f} to {o['last_us']:9.1f} µs")
    if args.json_out:
        tl.dump(args.json_out, tl.to_json(events, recipe.timeline.ops, meta))
        print(f"wrote {args.json_out}")
    if not events:
        return _fail("the instrumented build wrote no record (does the source record its "
                     "intervals under #ifdef REGEN_TIMELINE?)", 1)
    if args.timeline:
        tl.render(events, recipe.timeline.ops, args.timeline, _title(meta))
        print(f"wrote {args.timeline}")
    if not got["check"].get("ok"):
        return _fail(f"the instrumented build's outputs differ from the reference: "
                     f"{got['check'].get('reason')}", 1)
    return 0
