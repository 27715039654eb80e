"""`regen import kernelbench FILE.py` / `regen import gpumode DIR`: a problem from elsewhere as a
spec + oracle scaffold (regen/importers/)."""

from __future__ import annotations

from pathlib import Path

from . import _common

HELP = "turn a KernelBench problem or a GPU MODE task into a spec + oracle"


def add_arguments(parser) -> None:
    parser.add_argument("kind", choices=("kernelbench", "gpumode"),
                        help="kernelbench: a FILE.py with Model, get_inputs, get_init_inputs; "
                             "gpumode: a DIR with task.yml and reference.py")
    parser.add_argument("path", help="the problem file (kernelbench) or task folder (gpumode)")
    parser.add_argument("--name", help="kernel name (default: from the file or folder name)")
    parser.add_argument("--force", action="store_true", help="replace an existing spec/oracle")


def run(args) -> int:
    from ..importers import write
    from ..project import find_root

    if args.kind == "kernelbench":
        from ..importers.kernelbench import load
    else:
        from ..importers.gpumode import load
    root = find_root(Path(args.root) if args.root else None)
    problem = load(Path(args.path), args.name)
    spec_path, oracle_path = write(root, problem, args.force)
    bench = sum(1 for c in problem.cases if c.get("bench"))
    print(f"wrote {spec_path.relative_to(root)} and {oracle_path.relative_to(root)}: "
          f"{len(problem.inputs)} inputs, {len(problem.outputs)} output"
          f"{'s' if len(problem.outputs) != 1 else ''}, {len(problem.cases) - bench} correctness "
          f"and {bench} bench case{'s' if bench != 1 else ''}, dtype {problem.dtype}; next: "
          f"`regen tolerance {problem.name}`, then `regen build {problem.name}` or "
          f"`regen handoff {problem.name} -t T`")
    return 0
