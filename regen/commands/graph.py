"""The dependency graph of specs, oracles, targets and artifacts, as Graphviz dot or JSON."""

from __future__ import annotations

import sys

from . import _common

HELP = "the dependency graph"


def add_arguments(parser) -> None:
    _common.add_selection(parser, json_help="ignored; use --format json")
    parser.add_argument("--format", choices=("dot", "json"), default="dot", help="output format")


def run(args) -> int:
    from ..graph import build_graph, to_dot, to_json

    g = build_graph(_common.project(args), _common.kernels(args), _common.targets(args))
    sys.stdout.write(to_dot(g) if args.format == "dot" else to_json(g))
    return 0
