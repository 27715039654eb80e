"""What is up to date, stale or unverified per (kernel, target), and why. Reads the cache (and,
with a remote cache configured, first pulls what it lacks from there)."""

from __future__ import annotations

from . import _common

HELP = "what is up to date, stale or unverified, and why"


def add_arguments(parser) -> None:
    _common.add_selection(parser)
    _common.add_remote(parser)


def run(args) -> int:
    from .. import plan as planning, report

    project = _common.project(args)
    store = _common.store(project)
    _common.pull(args, project, _common.sync(args, project), store)
    nodes = planning.plan(project, store, _common.kernels(args),
                          _common.targets(args))
    report.status(nodes, args.json)
    return 1 if any(n.action == planning.FAILED for n in nodes) else 0
