"""regen's commands, one module each: `add_arguments(parser)` declares its options, `run(args)`
does it and returns the exit code, `HELP` is its line in `regen --help`.

COMMANDS is the table regen/cli.py builds the parser from, in the order `regen --help` lists them.
A command module imports what it needs inside `run`, so building the parser stays cheap and a
command that needs no GPU never imports torch.
"""

from __future__ import annotations

import importlib

COMMANDS = {
    "build": "build",
    "status": "status",
    "explain": "explain",
    "graph": "graph",
    "handoff": "handoff",
    "accept": "accept",
    "verify": "verify",
    "bench": "bench",
    "profile": "profile",
    "record": "record",
    "remote": "remote",
    "worker": "worker",
    "prompt": "prompt",
    "log": "log",
    "new": "new",
    "gc": "gc",
    "diff": "diff",
    "check": "check",
    "tolerance": "tolerance",
    "export": "export",
    "taxonomy": "taxonomy",
    "import": "import_",
}


def load(name: str):
    """The module of command `name`."""
    return importlib.import_module(f"{__name__}.{COMMANDS[name]}")
