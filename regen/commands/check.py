"""Plan only, for CI on CPU: exit 3 naming each cache entry whose spec, oracle or target changed
without regeneration or re-verification."""

from __future__ import annotations

from . import _common

HELP = ("plan only (CI on CPU): exit 3 naming each cache entry whose spec, oracle or target "
        "changed without regeneration or re-verification")


def add_arguments(parser) -> None:
    _common.add_selection(parser)


def run(args) -> int:
    from ..ci import check

    project = _common.project(args)
    return check(project, _common.store(project), _common.kernels(args), _common.targets(args),
                 args.json)
