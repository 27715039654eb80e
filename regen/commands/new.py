"""Scaffold specs/KERNEL.yaml and oracles/KERNEL.py for a new kernel."""

from __future__ import annotations

from pathlib import Path

HELP = "scaffold specs/KERNEL.yaml and oracles/KERNEL.py"


def add_arguments(parser) -> None:
    parser.add_argument("kernel", help="the new kernel's name")


def run(args) -> int:
    from ..scaffold import new_kernel

    root = Path(args.root) if args.root else Path.cwd()
    for p in new_kernel(root, args.kernel):
        print(f"wrote {p}")
    return 0
