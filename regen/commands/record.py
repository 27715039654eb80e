"""Verification records: `regen record import FILE` stores the records `regen verify --export`
wrote on a machine with the hardware."""

from __future__ import annotations

from pathlib import Path

from . import _common

HELP = "verification records"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="record_command", required=True, metavar="SUBCOMMAND")
    imp = sub.add_parser("import", help="import records exported by `regen verify --export`",
                         description="Check and store records exported by `regen verify --export`.",
                         formatter_class=parser.formatter_class)
    imp.add_argument("file", help="the file `regen verify --export` wrote")


def run(args) -> int:
    return {"import": _import}[args.record_command](args)


def _import(args) -> int:
    from ..records import import_records

    project = _common.project(args)
    n, skipped, promoted = import_records(project, _common.store(project), Path(args.file))
    print(f"imported {n} records" + (f"; skipped {len(skipped)}: " + "; ".join(skipped) if skipped else ""))
    for line in promoted:
        print(line)
    return 0 if not skipped else 1

