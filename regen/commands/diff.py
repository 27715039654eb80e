"""Semantic diff of specs, oracles and targets between two git revisions, and the rebuild plan it
implies (regen/diff/)."""

from __future__ import annotations

from . import _common

HELP = "semantic diff of specs/oracles/targets and the rebuild plan"


def add_arguments(parser) -> None:
    parser.add_argument("base", nargs="?", default="HEAD", help="the revision to compare against")
    parser.add_argument("head", nargs="?", default=None,
                        help="the revision to compare (default: the working tree)")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                        help="text for a terminal, markdown for a pull-request comment, json")
    parser.add_argument("--all", action="store_true",
                        help="list the unchanged nodes too, not only their count")
    parser.add_argument("--detailed-exitcode", action="store_true",
                        help="exit 0 when nothing changed, 1 on error, 2 when something changed")


def run(args) -> int:
    from ..diff import run_diff

    return run_diff(_common.project(args), args)
