"""`regen export -t T [-t T ...] -o DIR`: the verified kernels of those columns as an installable
package that needs only torch (and cuda-bindings for CUDA columns)."""

from __future__ import annotations

from pathlib import Path

from . import _common

HELP = "write the verified kernels of some columns as an installable Python package"


def add_arguments(parser) -> None:
    parser.add_argument("kernels", nargs="*", metavar="KERNEL",
                        help="kernels to export (default: every kernel)")
    parser.add_argument("--target", "-t", action="append", metavar="T", required=True,
                        help="target column to export, repeatable (e.g. -t h200 -t cpu)")
    parser.add_argument("--out", "-o", required=True, metavar="DIR",
                        help="folder to write the package into (pyproject.toml + the package)")
    parser.add_argument("--name", default="regen_kernels",
                        help="Python package name and torch.ops namespace (default: regen_kernels)")


def run(args) -> int:
    from ..export import export

    project = _common.project(args)
    exported, skipped = export(project, _common.store(project), args.target, Path(args.out),
                               args.name, _common.kernels(args))
    for line in skipped:
        print(f"skipped {line}")
    if not exported:
        print("nothing exported: no requested column has a verified artifact")
        return 1
    print(f"exported {len(exported)} kernel column{'s' if len(exported) != 1 else ''} "
          f"({', '.join(exported)}) to {args.out}: pip install {args.out}; import {args.name}")
    return 0
