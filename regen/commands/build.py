"""Bring every selected (kernel, target) up to date: plan, generate what is missing or stale,
compile, verify where the hardware is, store."""

from __future__ import annotations

import io
import sys

from . import _common

HELP = "bring every (kernel, target) up to date"


def add_arguments(parser) -> None:
    _common.add_selection(parser)
    _common.add_verbose(parser)
    _common.add_generator(parser)
    _common.add_verify(parser)
    _common.add_remote(parser)
    parser.add_argument("--locked", action="store_true", help="fail (exit 3) instead of generating")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, do nothing")
    parser.add_argument("--regenerate", action="store_true",
                        help="regenerate even up-to-date artifacts")
    parser.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                        help="nodes built at once (default: 1; with --executor ray, one per "
                             "worker slot); the local executor still verifies on a GPU one at a "
                             "time")
    _common.add_executor(parser)


def run(args) -> int:
    from .. import buildlog

    project = _common.project(args)
    selection = (tuple(args.kernels or ()), tuple(args.target or ()), args.json, args.locked)
    if args.verbose:  # a separate log entry: the output differs (appended, so old entries still match)
        selection += ("verbose",)
    sync = _common.sync(args, project)
    plain = not (args.dry_run or args.regenerate)
    # with a remote or a fleet, what others pushed or which workers joined may change the answer
    local = sync is None and args.executor == "local"
    if plain and local:
        signature, output = buildlog.lookup(project, selection)
        if output is not None:  # nothing changed since a build that succeeded everywhere
            sys.stdout.write(output)
            return 0
    from .. import build as building, plan as planning, report

    ctx = _common.context(args, project, locked=args.locked, dry_run=args.dry_run,
                          want_generator=not (args.locked or args.dry_run))
    if not args.dry_run:   # a dry run writes nothing, cache/ included
        _common.pull(args, project, sync, ctx.store)
    ctx.remote = None if args.dry_run else sync
    executor = _common.executor(args, project)
    ctx.executor = executor
    nodes = planning.plan(project, ctx.store, _common.kernels(args), _common.targets(args),
                          regenerate=args.regenerate, here=executor.here)
    if args.dry_run:
        executor.close()
        report.status(nodes, args.json)
        return 0
    with _common.progress(args, len(nodes)) as progress:
        ctx.progress = progress
        try:
            results = building.build(ctx, nodes, jobs=executor.jobs(args.jobs))
        finally:
            executor.close()
    if sync is not None:
        print(f"regen: remote {sync.remote.url}: {sync.pushed.line('pushed')}", file=sys.stderr)
    out = io.StringIO()
    report.build(results, args.json, out, verbose=args.verbose)
    sys.stdout.write(out.getvalue())
    if plain and local:
        buildlog.save(project, selection, results, out.getvalue())
    if any(r.status == "locked" for r in results):
        return 3
    return 1 if any(r.status == "failed" for r in results) else 0
