"""Print the exact prompt a generator gets for one node."""

from __future__ import annotations

import sys

from . import _common

HELP = "print the exact prompt a generator gets"


def add_arguments(parser) -> None:
    _common.add_node(parser)


def run(args) -> int:
    from ..prompt import build_prompt

    project = _common.project(args)
    store = _common.store(project)
    spec, target = project.spec(args.kernel), project.target(args.target)
    comps = [(c, e.source(), e.recipe()) for c in spec.components
             if (e := store.current(c, target.name)) is not None]
    sys.stdout.write(build_prompt(spec, target, comps, view=project.generation_view(target),
                                 cells=project.technique_cells(target)))
    return 0
