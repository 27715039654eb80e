"""Provenance of a node's cached artifact: who or what wrote it, and the search tree behind it."""

from __future__ import annotations

from ..errors import InputError
from . import _common

HELP = "provenance and search tree of the cached artifact"


def add_arguments(parser) -> None:
    _common.add_node(parser)


def run(args) -> int:
    project = _common.project(args)
    entry = _common.store(project).current(args.kernel, args.target)
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
