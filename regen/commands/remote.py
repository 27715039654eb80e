"""The remote cache by hand: `regen remote pull|push` (builds do both on their own when a remote
is configured) and `regen remote keygen FILE` (the ed25519 key a machine signs its pushes with)."""

from __future__ import annotations

import sys
from pathlib import Path

from . import _common

HELP = "the shared remote cache: pull, push, keygen"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="remote_command", required=True, metavar="SUBCOMMAND")
    for name, text in (("pull", "copy into cache/ what the remote holds and this project lacks"),
                       ("push", "copy out the selected nodes' entries, records and binaries")):
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".",
                           formatter_class=parser.formatter_class)
        _common.add_selection(p, json_help="(unused)")
        _common.add_remote(p)
    k = sub.add_parser("keygen", help="write a new ed25519 signing key and its public line",
                       description="Write FILE (the private key, mode 600; point REGEN_SIGNING_KEY "
                                   "at it) and FILE.pub (a line for the trust files of the machines "
                                   "that should believe this one).",
                       formatter_class=parser.formatter_class)
    k.add_argument("file", help="where to write the private key (FILE.pub: the public line)")
    k.add_argument("--name", help="the key's name (default: the file's name)")


def run(args) -> int:
    return {"pull": _pull, "push": _push, "keygen": _keygen}[args.remote_command](args)


def _configured(args, project):
    from ..errors import InputError

    sync = _common.sync(args, project)
    if sync is None:
        raise InputError("no remote cache: pass --remote URL, set REGEN_REMOTE, or put "
                         "`remote = \"s3://bucket/prefix\"` under [tool.regen] in regen.toml",
                         field="--remote")
    return sync


def _pull(args) -> int:
    project = _common.project(args)
    sync = _configured(args, project)
    report = sync.pull(project, _common.store(project), _common.kernels(args), _common.targets(args))
    print(f"{sync.remote.url}: {report.line('pulled')}")
    return 1 if report.refused else 0


def _push(args) -> int:
    project = _common.project(args)
    sync = _configured(args, project)
    store = _common.store(project)
    for spec, target in project.pairs(_common.kernels(args), _common.targets(args)):
        if store.current(spec.name, target.name) is not None:
            sync.push(project, store, spec.name, target.name)
    print(f"{sync.remote.url}: {sync.pushed.line('pushed')}")
    return 1 if sync.pushed.refused else 0


def _keygen(args) -> int:
    from ..remote.trust import keygen

    path = Path(args.file)
    signer = keygen(path, args.name or path.stem)
    print(f"wrote {path} (private: set REGEN_SIGNING_KEY={path}) and {path}.pub (key id "
          f"{signer.id}: add its line to the trust file of the machines that believe it)",
          file=sys.stderr)
    return 0
