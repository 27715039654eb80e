"""scripts/setup.sh: the README's two commands and CI's use the venv it makes; it installs the
Debian packages a stock Debian 12 lacks and says what it downloads; its venv runs regen from this
checkout. (scripts/clean_root_setup.sh proves it end to end in a debootstrapped Debian 12.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SETUP = REPO / "scripts" / "setup.sh"


def test_readme_opens_with_the_two_commands_and_ci_runs_the_tests_one():
    lines = (REPO / "README.md").read_text().splitlines()
    assert lines[2] == "```"
    main_job, tests = (line.split("#")[0].strip() for line in lines[3:5])
    assert main_job == "bash scripts/setup.sh && .venv/bin/regen build --target cpu --target h200 --target mi350"
    assert tests == "bash scripts/setup.sh && .venv/bin/python -m pytest -q"
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "bash scripts/setup.sh" in ci and ".venv/bin/python -m pytest -q" in ci
    assert "/.venv/" in (REPO / ".gitignore").read_text().splitlines()


def _fake_debian(bin_dir: Path, installed: set[str], clang_candidate: bool = True) -> Path:
    """dpkg-query, apt-get, apt-cache and id of a root shell on a Debian with `installed`; apt-get
    logs its arguments to bin_dir/apt.log."""
    bin_dir.mkdir()
    log = bin_dir / "apt.log"
    scripts = {
        "dpkg-query": f'for p in "$@"; do :; done; case " {" ".join(sorted(installed))} " in '
                      f'*" $p "*) printf "install ok installed";; *) exit 1;; esac',
        "apt-get": f'echo "apt-get $*" >> {log}; '
                   'if [ "$1" = install ]; then echo "Need to get 230 MB of archives."; '
                   'echo "After this operation, 1026 MB of additional disk space will be used."; fi',
        "apt-cache": 'echo "clang-22:"; echo "  Installed: (none)"; '
                     + ('echo "  Candidate: 1:22.1.8-1~deb12u1"' if clang_candidate
                        else 'echo "  Candidate: (none)"'),
        "id": "echo 0",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return log


def _setup(bin_dir: Path, venv: str):
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", REGEN_VENV=venv)
    return subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, env=env, timeout=300)


def test_missing_debian_packages_are_announced_with_their_size_then_installed(tmp_path):
    log = _fake_debian(tmp_path / "bin", installed={"python3", "python3-venv", "ca-certificates",
                                                     "llvm-22", "libamdhip64-dev"})
    # A venv path that cannot be made stops the script right after the Debian step.
    proc = _setup(tmp_path / "bin", "/dev/null/venv")
    lines = proc.stdout.splitlines()
    assert lines[0] == ("setup: installing Debian packages: g++ git clang-22 lld-22 (apt-get, from "
                        "this machine's Debian mirrors)")
    assert lines[1:3] == ["setup:   apt: Need to get 230 MB of archives.",
                          "setup:   apt: After this operation, 1026 MB of additional disk space will be used."]
    calls = log.read_text().splitlines()
    assert calls == ["apt-get update -q",
                     "apt-get install -y -q --no-install-recommends g++ git clang-22 lld-22"]
    assert proc.returncode == 1 and "python3 -m venv failed" in proc.stderr


def test_without_bookworm_security_setup_says_where_clang_22_comes_from(tmp_path):
    log = _fake_debian(tmp_path / "bin", installed={"python3"}, clang_candidate=False)
    proc = _setup(tmp_path / "bin", str(tmp_path / "venv"))
    assert proc.returncode == 1
    assert "apt has no clang-22: it comes from bookworm-security" in proc.stderr
    assert "deb http://deb.debian.org/debian-security bookworm-security main" in proc.stderr
    assert not any(c.startswith("apt-get install") for c in log.read_text().splitlines())
    assert not (tmp_path / "venv").exists()


def _system_torch() -> bool:
    return subprocess.run(["python3", "-c", "import torch"], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _system_torch(), reason="python3 has no torch: setup would download it "
                    "again (scripts/clean_root_setup.sh covers that path)")
def test_setup_makes_a_venv_that_runs_regen_from_this_checkout_and_keeps_it(tmp_path):
    venv = tmp_path / "venv"
    env = dict(os.environ, REGEN_VENV=str(venv))
    env.pop("PYTHONPATH", None)
    first = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, env=env,
                           timeout=1200)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"setup: creating the virtual environment {venv}" in first.stdout
    assert first.stdout.splitlines()[-1] == f"setup: ok: {venv}/bin/regen ...   {venv}/bin/python -m pytest -q"
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import regen, torch; print(regen.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert where.returncode == 0 and Path(where.stdout.strip()) == REPO / "regen" / "__init__.py"
    assert subprocess.run([str(venv / "bin" / "regen"), "--version"], capture_output=True,
                          env=env).returncode == 0
    again = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, env=env,
                           timeout=1200)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "creating the virtual environment" not in again.stdout
    assert "is already installed: kept" in again.stdout
