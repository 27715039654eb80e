"""regen's command line: the table of commands (regen/commands/) and main.

Exit codes: 0 success, 1 a node failed, 2 usage or invalid input, 3 --locked and something needs
generation; 128 + N after signal N (130 Ctrl-C, 143 SIGTERM; 141 when the reader of stdout went
away). Commands that need no GPU never import torch.
"""

from __future__ import annotations

import argparse
import os
import signal
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
    """Run one command. A signal (SIGINT, SIGTERM, SIGHUP) first kills the process groups regen
    started (the judge's child, the artifact's process, a generator command), then exits
    128 + its number with one line; a reader that closes the pipe early (`| head`) ends it quietly."""
    from . import procs

    args = parser().parse_args(argv)
    try:
        with procs.stop_on_signals():
            code = args.func(args)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
            return code
    except RegenError as exc:
        print(f"regen: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except procs.Stopped as stopped:
        print(f"regen: stopped by {stopped}: the judge and the artifacts' processes were killed",
              file=sys.stderr)
        return 128 + stopped.signum
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] == "regen":
            raise   # regen's own module: a broken install or a bug, the traceback says where
        print(f"regen: error: the Python package {exc.name.split('.')[0]!r} is not importable by "
              f"{sys.executable}: install regen with its dependencies in this interpreter "
              f"(pip install -e . from the repository; README.md)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a Ctrl-C before the handlers were in place
        print("regen: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 128 + signal.SIGPIPE


def _quiet_stdout() -> None:
    """The reader went away: send what is still buffered to /dev/null, so that the interpreter's
    flush at exit does not print a second traceback."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
