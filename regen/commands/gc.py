"""Remove what killed builds left behind in cache/."""

from __future__ import annotations

from . import _common

HELP = "remove leftovers of killed builds from cache/"


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    project = _common.project(args)
    for p in _common.store(project).gc():
        print(f"removed {p}")
    return 0
