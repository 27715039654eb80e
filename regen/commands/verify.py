"""Re-verify the cached artifacts whose hardware is on this machine against their oracles; CI
reports (JUnit XML, step summary, annotations) and records to export to another checkout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import _common

HELP = "re-verify cached artifacts on this machine's hardware"


def add_arguments(parser) -> None:
    _common.add_selection(parser)
    _common.add_verbose(parser)
    _common.add_verify(parser)
    _common.add_remote(parser)
    _common.add_executor(parser)
    parser.add_argument("--export", metavar="FILE",
                        help="write the verification records to FILE (for `regen record import`)")
    parser.add_argument("--junit", metavar="FILE", help="write JUnit XML to FILE")
    parser.add_argument("--summary", metavar="FILE",
                        help="write a Markdown summary to FILE (default: $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--allow-empty", action="store_true",
                        help="exit 0 when no selected target's hardware is here")


def run(args) -> int:
    from .. import build as building, ci, plan as planning, report

    project = _common.project(args)
    ctx = _common.context(args, project)  # seeds, seed and timeout come from the arguments
    sync = _common.sync(args, project)
    _common.pull(args, project, sync, ctx.store)
    ctx.remote = sync
    executor = ctx.executor = _common.executor(args, project)
    nodes = planning.plan(project, ctx.store, _common.kernels(args), _common.targets(args),
                          intent="verify", here=executor.here)
    todo = [n for n in nodes if not n.skip]
    skipped = [n for n in nodes if n.skip and n.action != planning.UNSUPPORTED]
    with _common.progress(args, len(todo)) as progress:
        ctx.progress = progress
        try:   # the local executor verifies one node at a time (clean timings); a fleet at once
            results = building.build(ctx, todo, jobs=1 if executor.name == "local"
                                     else executor.jobs(args.jobs))
        finally:
            executor.close()
    if sync is not None:
        print(f"regen: remote {sync.remote.url}: {sync.pushed.line('pushed')}", file=sys.stderr)
    report.build(results, args.json, verbose=args.verbose)
    rows = [{"kernel": r.node.kernel, "target": r.node.target, **b}
            for r in results if r.outcome is not None for b in r.outcome.bench]
    if rows and not args.json:
        print()
        report.bench(rows, False)
    if not args.json:
        for n in skipped:
            print(f"{n.label}: not verified here ({n.skip})")
    if args.export:
        records = [r.record for r in results if r.record]
        Path(args.export).write_text(json.dumps({"records": records}, indent=1))
        print(f"exported {len(records)} records to {args.export}", file=sys.stderr)
    ci.write_reports(results, skipped, args.junit, args.summary)
    if not todo and not args.allow_empty:
        print("nothing was verified: no selected target's hardware is on this machine",
              file=sys.stderr)
        return 1
    return 1 if any(r.status != "ok" for r in results) else 0
