"""regen's command line: the table of commands (regen/commands/) and main.

Exit codes: 0 success, 1 a node failed, 2 usage or invalid input, 3 --locked and something needs
generation. Commands that need no GPU never import torch.
"""

from __future__ import annotations

import argparse
import sys

from .commands import COMMANDS, load
from .errors import RegenError


def version() -> str:
    """The installed package's version, or the source tree's when regen is not installed."""
    from importlib import metadata

    try:
        return metadata.version("regen")
    except metadata.PackageNotFoundError:
        from . import __version__

        return __version__


EXIT_CODES = ("exit codes: 0 success, 1 a node failed, 2 usage or invalid input, 3 --locked and "
              "something needs generation")


class HelpFormatter(argparse.HelpFormatter):
    """Every option shows its default, unless its help already says what happens without it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) \
                or isinstance(action, argparse._SubParsersAction):
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            return f"{text} (default: %(default)s)"
        return text


def parser() -> argparse.ArgumentParser:
    from . import __doc__ as about

    p = argparse.ArgumentParser(prog="regen", description=about.strip(), epilog=EXIT_CODES,
                                formatter_class=HelpFormatter)
    p.add_argument("--root", metavar="DIR",
                   help="project folder (default: the nearest folder up with specs/ and targets/)")
    p.add_argument("--version", action="version", version=f"regen {version()}",
                   help="print regen's version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        command = load(name)
        sp = sub.add_parser(name, help=command.HELP, description=command.__doc__,
                            formatter_class=HelpFormatter)
        command.add_arguments(sp)
        sp.set_defaults(func=command.run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except RegenError as exc:
        print(f"regen: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("regen: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
