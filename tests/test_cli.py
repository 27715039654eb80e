"""The command line (regen/cli.py and regen/commands/): a table of command modules, help for every
option with its default, `--version`, `python -m regen`, and no torch for commands without a GPU."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from conftest import REPO
from regen import commands
from regen.cli import main, parser


def _subparsers(p: argparse.ArgumentParser, prefix: str = ""):
    """(name, parser) of every command, nested ones (`record import`) included."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sp in action.choices.items():
                yield f"{prefix}{name}", sp
                yield from _subparsers(sp, f"{prefix}{name} ")


def test_every_option_has_help_text_that_shows_its_default():
    p = parser()
    found = list(_subparsers(p))
    assert {name for name, _ in found} >= set(commands.COMMANDS) | {"record import"}
    for name, sp in [("regen", p), *found]:
        text = " ".join(sp.format_help().split())
        for action in sp._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            flag = "/".join(action.option_strings) or action.dest
            assert action.help, f"{name} {flag} has no help text"
            default = action.default
            if default in (None, False, argparse.SUPPRESS) or action.required:
                continue
            if action.option_strings or action.nargs in ("?", "*"):
                shown = f"(default: {default})" in text or "(default:" in action.help
                assert shown, f"{name} {flag}: its default {default!r} is not in the help"


def test_the_table_lists_every_command_module():
    folder = REPO / "regen" / "commands"
    modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(commands.COMMANDS.values())
    for name in commands.COMMANDS:
        module = commands.load(name)
        assert module.HELP and callable(module.add_arguments) and callable(module.run), name


def test_building_the_parser_imports_no_pipeline_module():
    code = ("import sys; from regen.cli import parser; parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('regen.') "
            "and not m.startswith('regen.commands')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out.strip() == "['regen.cli', 'regen.errors']"


def test_version(capsys):
    try:
        want = metadata.version("regen")
    except metadata.PackageNotFoundError:
        from regen import __version__ as want
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"regen {want}\n"
    proc = subprocess.run([sys.executable, "-m", "regen", "--version"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout == f"regen {want}\n"


def test_python_dash_m_regen_runs_commands_with_the_cli_exit_codes(project):
    env = {**os.environ, "PYTHONPATH": str(REPO), "REGEN_LOCAL_CACHE": str(project / ".lc")}
    ok = subprocess.run([sys.executable, "-m", "regen", "--root", str(project), "status", "--json"],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and json.loads(ok.stdout)[0]["action"] == "generate"
    bad = subprocess.run([sys.executable, "-m", "regen", "--root", str(project), "status", "nosuch"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("regen: error: ")
    assert "unknown kernel 'nosuch'" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_a_missing_dependency_is_one_line_naming_the_package_and_the_interpreter(project):
    """An interpreter without regen's dependencies (a system python beside the venv) gets one
    line that names the package, not an import traceback from deep inside a command."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "REGEN_LOCAL_CACHE": str(project / ".lc")}
    code = ("import sys; sys.modules['diskcache'] = None\n"   # as if it were not installed
            "from regen.cli import main\n"
            f"sys.exit(main(['--root', {str(project)!r}, 'status']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "'diskcache' is not importable by" in proc.stderr
    assert sys.executable in proc.stderr


NO_GPU = [["status"], ["status", "--json"], ["explain", "scale", "-t", "cpu"], ["graph"],
          ["prompt", "scale", "-t", "cpu"], ["check"], ["build", "--dry-run"],
          ["bench", "--recorded"], ["log", "scale", "-t", "cpu"], ["gc"],
          ["handoff", "scale", "-t", "cpu", "--out", "{tmp}/h"], ["record", "--help"],
          ["export", "-t", "cpu", "-o", "{tmp}/e"], ["taxonomy", "--declared-users"],
          ["profile", "scale", "-t", "cpu", "--json", "{tmp}/t.json"]]


def test_commands_that_need_no_gpu_do_not_import_torch(project, tmp_path):
    script = f"""
import contextlib, io, json, sys
from regen.cli import main
seen = {{}}
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["--root", {str(project)!r}, *argv])
        except SystemExit:
            pass
    seen[" ".join(argv)] = "torch" in sys.modules
print(json.dumps(seen))
"""
    argv = [[a.replace("{tmp}", str(tmp_path)) for a in args] for args in NO_GPU]
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(argv)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO),
                                          "REGEN_LOCAL_CACHE": str(tmp_path / "lc")})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert len(seen) == len(NO_GPU) and not any(seen.values()), seen
    assert (tmp_path / "h" / "prompt.md").is_file()       # the commands really ran
