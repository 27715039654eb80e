"""Write a task folder (prompt, a source to fill in, the launch recipe) for a person or any agent
to implement one node; `regen accept` takes it back."""

from __future__ import annotations

from pathlib import Path

from . import _common

HELP = "write a task folder for a person to implement"


def add_arguments(parser) -> None:
    _common.add_node(parser)
    parser.add_argument("--out", metavar="DIR", help="folder (default: handoffs/KERNEL@TARGET)")


def run(args) -> int:
    from .. import plan as planning
    from ..generators import SOURCE_NAMES
    from ..generators.handoff import write_task
    from ..prompt import build_prompt

    project = _common.project(args)
    store = _common.store(project)
    spec, target = project.spec(args.kernel), project.target(args.target)
    node = planning.plan_node(project, store, spec, target)
    comps = [(c, e.source(), e.recipe()) for c in spec.components
             if (e := store.current(c, target.name)) is not None]
    folder = Path(args.out) if args.out else project.root / "handoffs" / f"{spec.name}@{target.name}"
    existing = None
    if node.entry is not None:  # start from the cached implementation, not from a stub
        existing = (node.entry.source(), node.entry.recipe())
    prompt = build_prompt(spec, target, comps, view=project.generation_view(target),
                          cells=project.technique_cells(target))
    write_task(folder, spec, target, prompt, node.generate_components,
               node.generate_key, existing)
    print(f"wrote {folder}: prompt.md, {SOURCE_NAMES[target.language]}, launch.yaml; "
          f"when done: regen accept {folder}")
    return 0
