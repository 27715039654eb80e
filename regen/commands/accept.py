"""Compile, verify and store the implementation in a handoff folder, with provenance `handoff`."""

from __future__ import annotations

from pathlib import Path

from . import _common

HELP = "compile, verify and store a handoff folder"


def add_arguments(parser) -> None:
    parser.add_argument("folder", help="the folder `regen handoff` wrote")
    parser.add_argument("--force", action="store_true", help="accept although the spec changed since the handoff was written, and make "
                        "the entry current even when it is not verified and the current one is")
    parser.add_argument("--author", help="who wrote it, for provenance (default: git user.name)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    _common.add_verbose(parser)
    _common.add_verify(parser)


def run(args) -> int:
    from .. import build as building, report

    project = _common.project(args)
    ctx = _common.context(args, project)
    result = building.accept(ctx, Path(args.folder), force=args.force, author=args.author)
    report.build([result], args.json, verbose=args.verbose)
    return 0 if result.status == "ok" else 1
