"""Why one node needs what it needs: the key components that changed, one line each."""

from __future__ import annotations

from . import _common

HELP = "which key components changed, one line each"


def add_arguments(parser) -> None:
    _common.add_node(parser)


def run(args) -> int:
    from .. import plan as planning

    project = _common.project(args)
    store = _common.store(project)
    project.spec(args.kernel), project.target(args.target)   # clear errors first
    # planned with its components, so a component that will be rebuilt is named
    node = next(n for n in planning.plan(project, store, [args.kernel], [args.target])
                if n.kernel == args.kernel)
    print(node.line().split(": ", 1)[0] + ": " + node.action)
    for reason in node.reasons:
        print(f"  {reason}")
    if node.entry is not None:
        prov = node.entry.provenance()
        who = prov.get("generator")
        extra = prov.get("model") or prov.get("command") or prov.get("author") or ""
        print(f"  entry {node.entry.id} by {who}{f' ({extra})' if extra else ''}")
    return 0
