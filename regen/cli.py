"""regen's command line: a thin shell over the pipeline modules.

Exit codes: 0 success, 1 a node failed, 2 usage or invalid input, 3 --locked and something needs
generation. Commands that need no GPU never import torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import InputError, RegenError


def _project(args):
    from .project import Project, find_root

    return Project(find_root(Path(args.root) if args.root else None))


def _store(project):
    from .store import Store

    return Store(project.cache_dir)


def _generator(args):
    """(generator, problem): the configured generator, or why there is none."""
    choice = args.generator or os.environ.get("REGEN_GENERATOR") or "auto"
    if choice.startswith("command:"):
        from .generators.command import CommandGenerator

        return CommandGenerator(choice.split(":", 1)[1]), None
    if choice in ("llm", "auto"):
        if os.environ.get("ANTHROPIC_API_KEY"):
            from .generators.llm import LLMGenerator

            return LLMGenerator(model=args.model) if getattr(args, "model", None) else LLMGenerator(), None
        why = ("no generator: set ANTHROPIC_API_KEY for the LLM generator, use "
               "--generator command:CMD for a coding agent, or `regen handoff KERNEL --target T` "
               "to write it by hand")
        if choice == "llm":
            raise InputError(why)
        return None, why
    if choice == "none":
        return None, "generation disabled (--generator none)"
    raise InputError(f"unknown generator {choice!r}; expected llm, command:CMD or none",
                     field="--generator")


def _budget(args):
    from .search import Budget

    return Budget(max_candidates=args.max_candidates, repair_rounds=args.repair_rounds,
                  max_usd=args.max_usd, max_seconds=args.max_seconds)


def _context(args, project, **kw):
    from .build import Context
    from .judge import Settings

    settings = Settings(seeds=getattr(args, "seeds", 2) or 2,
                        fixed_seed=getattr(args, "seed", None),
                        timeout_s=getattr(args, "timeout", 600.0) or 600.0)
    gen, problem = (None, None)
    if kw.pop("want_generator", False):
        gen, problem = _generator(args)
    budget = _budget(args) if gen is not None else None
    return Context(project, _store(project), generator=gen, generator_problem=problem,
                   settings=settings, budget=budget, **kw)


def _progress(as_json: bool):
    if as_json or not sys.stderr.isatty():
        return None

    def show(result, i, n):
        print(f"[{i + 1}/{n}] {result.node.label}: {result.status}", file=sys.stderr, flush=True)

    return show


# -- commands ----------------------------------------------------------------------------------
def cmd_build(args) -> int:
    from . import buildlog

    project = _project(args)
    selection = (tuple(args.kernels or ()), tuple(args.target or ()), args.json, args.locked)
    plain = not (args.dry_run or args.regenerate)
    if plain:
        signature, output = buildlog.lookup(project, selection)
        if output is not None:  # nothing changed since a build that succeeded everywhere
            sys.stdout.write(output)
            return 0
    import io

    from . import build as building, plan as planning, report

    ctx = _context(args, project, locked=args.locked, dry_run=args.dry_run,
                   want_generator=not (args.locked or args.dry_run))
    nodes = planning.plan(project, ctx.store, args.kernels or None, args.target or None,
                          regenerate=args.regenerate)
    if args.dry_run:
        report.status(nodes, args.json)
        return 0
    ctx.progress = _progress(args.json)
    results = building.build(ctx, nodes, jobs=args.jobs)
    out = io.StringIO()
    report.build(results, args.json, out)
    sys.stdout.write(out.getvalue())
    if plain:
        buildlog.save(project, selection, results, out.getvalue())
    if any(r.status == "locked" for r in results):
        return 3
    return 1 if any(r.status == "failed" for r in results) else 0


def cmd_status(args) -> int:
    from . import plan as planning, report

    project = _project(args)
    nodes = planning.plan(project, _store(project), args.kernels or None, args.target or None)
    report.status(nodes, args.json)
    return 1 if any(n.action == planning.FAILED for n in nodes) else 0


def cmd_explain(args) -> int:
    from . import plan as planning

    project = _project(args)
    store = _store(project)
    node = planning.plan_node(project, store, project.spec(args.kernel), project.target(args.target))
    print(node.line().split(": ", 1)[0] + ": " + node.action)
    for reason in node.reasons:
        print(f"  {reason}")
    if node.entry is not None:
        prov = node.entry.provenance()
        who = prov.get("generator")
        extra = prov.get("model") or prov.get("command") or prov.get("author") or ""
        print(f"  entry {node.entry.id} by {who}{f' ({extra})' if extra else ''}")
    return 0


def cmd_graph(args) -> int:
    from .graph import build_graph, to_dot, to_json

    g = build_graph(_project(args), args.kernels or None, args.target or None)
    sys.stdout.write(to_dot(g) if args.format == "dot" else to_json(g))
    return 0


def cmd_handoff(args) -> int:
    from . import plan as planning
    from .generators.handoff import write_task
    from .prompt import build_prompt

    project = _project(args)
    store = _store(project)
    spec, target = project.spec(args.kernel), project.target(args.target)
    node = planning.plan_node(project, store, spec, target)
    comps = [(c, e.source(), e.recipe()) for c in spec.components
             if (e := store.current(c, target.name)) is not None]
    folder = Path(args.out) if args.out else project.root / "handoffs" / f"{spec.name}@{target.name}"
    existing = None
    if node.entry is not None:  # start from the cached implementation, not from a stub
        existing = (node.entry.source(), node.entry.recipe())
    view = project.generation_view(target)
    write_task(folder, spec, target, build_prompt(spec, target, comps, view=view),
               node.generate_components,
               node.generate_key, existing)
    from .generators import SOURCE_NAMES

    print(f"wrote {folder}: prompt.md, {SOURCE_NAMES[target.language]}, launch.yaml; "
          f"when done: regen accept {folder}")
    return 0


def cmd_accept(args) -> int:
    from . import build as building, report

    project = _project(args)
    ctx = _context(args, project)
    result = building.accept(ctx, Path(args.folder), force=args.force, author=args.author)
    report.build([result], args.json)
    return 0 if result.status == "ok" else 1


def cmd_verify(args) -> int:
    from . import build as building, plan as planning, report

    project = _project(args)
    ctx = _context(args, project)  # seeds, seed and timeout come from the arguments
    nodes = planning.plan(project, ctx.store, args.kernels or None, args.target or None,
                          intent="verify")
    todo = [n for n in nodes if not n.skip]
    skipped = [n for n in nodes if n.skip and n.action != planning.UNSUPPORTED]
    ctx.progress = _progress(args.json)
    results = building.build(ctx, todo, jobs=1)
    report.build(results, args.json)
    rows = [{"kernel": r.node.kernel, "target": r.node.target, **b}
            for r in results if r.outcome is not None for b in r.outcome.bench]
    if rows and not args.json:
        print()
        report.bench(rows, False)
    for n in skipped:
        if not args.json:
            print(f"{n.label}: not verified here ({n.skip})")
    if args.export:
        records = [r.record for r in results if r.record]
        Path(args.export).write_text(json.dumps({"records": records}, indent=1))
        print(f"exported {len(records)} records to {args.export}", file=sys.stderr)
    from . import ci

    ci.write_reports(results, skipped, args.junit, args.summary)
    if not todo and not args.allow_empty:
        print("nothing was verified: no selected target's hardware is on this machine",
              file=sys.stderr)
        return 1
    return 1 if any(r.status != "ok" for r in results) else 0


def _bench_recorded(nodes, as_json: bool) -> int:
    """The benchmark rows of the records that decide each node (the up-to-date one, or the failed
    or stale one named in its reasons), with where and when they were measured."""
    from . import plan as planning, report

    rows, sources = [], []
    for n in nodes:
        rec = n.record
        if not rec or not rec.get("bench"):
            continue
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
    report.bench(rows, False)
    print()
    print("\n".join(sources))
    return 0


def cmd_bench(args) -> int:
    from . import build as building, plan as planning, report
    from .judge import Settings

    project = _project(args)
    ctx = _context(args, project)
    ctx.settings = Settings(seeds=1, bench=True, iters=args.iters, timeout_s=args.timeout)
    nodes = planning.plan(project, ctx.store, args.kernels or None, args.target or None,
                          intent="build" if args.recorded else "bench")
    if args.recorded:
        return _bench_recorded(nodes, args.json)
    rows = []
    results = []
    for n in nodes:
        if n.skip or n.action == planning.UNSUPPORTED:
            continue
        spec = project.spec(n.kernel)
        bench_cases = spec.bench_cases()
        if not bench_cases:
            continue
        r = building.bench_node(ctx, n, bench_cases)
        results.append(r)
        if r.outcome is not None:
            for b in r.outcome.bench:
                rows.append({"kernel": n.kernel, "target": n.target, **b})
        if r.status != "ok" and (r.outcome is None or not r.outcome.bench):
            rows.append({"kernel": n.kernel, "target": n.target, "case": "—", "ok": False,
                         "reason": r.summary})
    report.bench(rows, args.json)
    if args.export:
        records = [r.record for r in results if r.record]
        Path(args.export).write_text(json.dumps({"records": records, "bench": rows}, indent=1))
    return 1 if any(r.status != "ok" for r in results) else 0


def cmd_record_import(args) -> int:
    from .records import import_records

    project = _project(args)
    n, skipped = import_records(project, _store(project), Path(args.file))
    print(f"imported {n} records" + (f"; skipped {len(skipped)}: " + "; ".join(skipped) if skipped else ""))
    return 0 if not skipped else 1


def cmd_prompt(args) -> int:
    from .prompt import build_prompt

    project = _project(args)
    store = _store(project)
    spec, target = project.spec(args.kernel), project.target(args.target)
    comps = [(c, e.source(), e.recipe()) for c in spec.components
             if (e := store.current(c, target.name)) is not None]
    sys.stdout.write(build_prompt(spec, target, comps, view=project.generation_view(target)))
    return 0


def cmd_log(args) -> int:
    project = _project(args)
    entry = _store(project).current(args.kernel, args.target)
    if entry is None:
        raise InputError(f"no artifact for {args.kernel}@{args.target}")
    prov = entry.provenance()
    print(f"{args.kernel}@{args.target} entry {entry.id}")
    for k in sorted(prov):
        if k not in ("search", "spend"):
            print(f"  {k}: {prov[k]}")
    for node in prov.get("search", []):
        mark = "✓" if node.get("ok") else "✗"
        t = f" {node['time_s'] * 1e6:.1f} µs" if node.get("time_s") else ""
        print(f"  {mark} #{node.get('id')} (parent {node.get('parent')}) {node.get('purpose')}: "
              f"{node.get('note') or ''} → {node.get('stage')}{t}")
    if prov.get("spend"):
        print(f"  spend: {prov['spend']}")
    return 0


def cmd_new(args) -> int:
    from .scaffold import new_kernel

    root = Path(args.root) if args.root else Path.cwd()
    for p in new_kernel(root, args.kernel):
        print(f"wrote {p}")
    return 0


def cmd_gc(args) -> int:
    project = _project(args)
    removed = _store(project).gc()
    for p in removed:
        print(f"removed {p}")
    return 0


def cmd_diff(args) -> int:
    from .diff import run_diff

    return run_diff(_project(args), args)


def cmd_check(args) -> int:
    from .ci import check

    project = _project(args)
    return check(project, _store(project), args.kernels or None, args.target or None, args.json)


# -- parser ------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="regen", description=__doc__.split("\n")[0])
    p.add_argument("--root", help="project folder (default: nearest with specs/ and targets/)")
    sub = p.add_subparsers(dest="command", required=True)

    def selection(sp, kernels=True):
        if kernels:
            sp.add_argument("kernels", nargs="*", metavar="KERNEL")
        sp.add_argument("--target", "-t", action="append", metavar="T", help="target column (repeatable)")
        sp.add_argument("--json", action="store_true", help="machine-readable output")

    def gen_opts(sp):
        sp.add_argument("--generator", help="llm | command:CMD | none (default: llm if ANTHROPIC_API_KEY is set)")
        sp.add_argument("--model", help="LLM model id")
        sp.add_argument("--max-candidates", type=int, default=8)
        sp.add_argument("--repair-rounds", type=int, default=3)
        sp.add_argument("--max-usd", type=float, default=5.0)
        sp.add_argument("--max-seconds", type=float, default=1800.0)

    def verify_opts(sp):
        sp.add_argument("--seeds", type=int, default=2, help="fresh seeds per correctness case")
        sp.add_argument("--seed", type=int, help="fix the seed (reproduce a failure)")
        sp.add_argument("--timeout", type=float, default=600.0, help="seconds per child process")

    sp = sub.add_parser("build", help="bring every (kernel, target) up to date")
    selection(sp)
    gen_opts(sp)
    verify_opts(sp)
    sp.add_argument("--locked", action="store_true", help="fail (exit 3) instead of generating")
    sp.add_argument("--dry-run", action="store_true", help="print the plan, do nothing")
    sp.add_argument("--regenerate", action="store_true", help="regenerate even up-to-date artifacts")
    sp.add_argument("--jobs", "-j", type=int, default=1)
    sp.set_defaults(func=cmd_build)

    sp = sub.add_parser("status", help="what is up to date, stale or unverified, and why")
    selection(sp)
    sp.set_defaults(func=cmd_status)

    sp = sub.add_parser("explain", help="which key components changed, one line each")
    sp.add_argument("kernel")
    sp.add_argument("--target", "-t", required=True)
    sp.set_defaults(func=cmd_explain)

    sp = sub.add_parser("graph", help="the dependency graph")
    selection(sp)
    sp.add_argument("--format", choices=("dot", "json"), default="dot")
    sp.set_defaults(func=cmd_graph)

    sp = sub.add_parser("handoff", help="write a task folder for a person to implement")
    sp.add_argument("kernel")
    sp.add_argument("--target", "-t", required=True)
    sp.add_argument("--out", help="folder (default handoffs/KERNEL@TARGET)")
    sp.set_defaults(func=cmd_handoff)

    sp = sub.add_parser("accept", help="compile, verify and store a handoff folder")
    sp.add_argument("folder")
    sp.add_argument("--force", action="store_true", help="accept although the spec changed since")
    sp.add_argument("--author", help="who wrote it, for provenance (default: git user.name)")
    sp.add_argument("--json", action="store_true")
    verify_opts(sp)
    sp.set_defaults(func=cmd_accept)

    sp = sub.add_parser("verify", help="re-verify cached artifacts on this machine's hardware")
    selection(sp)
    verify_opts(sp)
    sp.add_argument("--export", help="write the verification records to FILE (for `regen record import`)")
    sp.add_argument("--junit", help="write JUnit XML to FILE")
    sp.add_argument("--summary", help="write a Markdown summary to FILE (default $GITHUB_STEP_SUMMARY)")
    sp.add_argument("--allow-empty", action="store_true", help="exit 0 when no hardware is here")
    sp.set_defaults(func=cmd_verify)

    sp = sub.add_parser("bench", help="time benchmark cases against torch eager and torch.compile")
    selection(sp)
    sp.add_argument("--iters", type=int, default=None)
    sp.add_argument("--timeout", type=float, default=900.0)
    sp.add_argument("--export", help="write records and the table to FILE")
    sp.add_argument("--recorded", action="store_true",
                    help="print the timings in the current records instead of timing here (no GPU needed)")
    sp.set_defaults(func=cmd_bench)

    sp = sub.add_parser("record", help="verification records")
    rsub = sp.add_subparsers(dest="record_command", required=True)
    ri = rsub.add_parser("import", help="import records exported by `regen verify --export`")
    ri.add_argument("file")
    ri.set_defaults(func=cmd_record_import)

    sp = sub.add_parser("prompt", help="print the exact prompt a generator gets")
    sp.add_argument("kernel")
    sp.add_argument("--target", "-t", required=True)
    sp.set_defaults(func=cmd_prompt)

    sp = sub.add_parser("log", help="provenance and search tree of the cached artifact")
    sp.add_argument("kernel")
    sp.add_argument("--target", "-t", required=True)
    sp.set_defaults(func=cmd_log)

    sp = sub.add_parser("new", help="scaffold specs/KERNEL.yaml and oracles/KERNEL.py")
    sp.add_argument("kernel")
    sp.set_defaults(func=cmd_new)

    sp = sub.add_parser("gc", help="remove leftovers of killed builds from cache/")
    sp.set_defaults(func=cmd_gc)

    sp = sub.add_parser("diff", help="semantic diff of specs/oracles/targets and the rebuild plan")
    sp.add_argument("base", nargs="?", default="HEAD")
    sp.add_argument("head", nargs="?", default=None)
    sp.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    sp.add_argument("--detailed-exitcode", action="store_true")
    sp.set_defaults(func=cmd_diff)

    sp = sub.add_parser("check", help="plan only (CI on CPU): exit 3 naming each cache entry whose "
                        "spec, oracle or target changed without regeneration or re-verification")
    selection(sp)
    sp.set_defaults(func=cmd_check)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except RegenError as exc:
        print(f"regen: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("regen: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
