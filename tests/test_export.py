"""regen export: verified kernels as a package that needs torch only. The host column is verified
for real on a copy of the project first; the exported package is installed with pip and imported
in a process where regen, yaml and pydantic cannot be imported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, regen

pytest.importorskip("torch")

RUN_CPU_OP = """
import torch, regen_kernels as rk
x, w = torch.randn(5, 300), torch.randn(300)
y = rk.rmsnorm(x, w)
err = (y - torch.nn.functional.rms_norm(x, (300,), w, 1e-6)).abs().max().item()
print(rk.runs("rmsnorm", x, w), err < 1e-5, sorted({c["column"] for c in rk.columns()}))
try:
    import regen
except ImportError as exc:
    print("no regen:", exc)
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("export")
    root = base / "proj"
    for name in ("specs", "oracles", "targets", "cache"):
        shutil.copytree(REPO / name, root / name)
    env = {"REGEN_LOCAL_CACHE": str(base / "lc")}
    # softmax unverified whatever machine the committed records came from; rmsnorm verified here
    shutil.rmtree(root / "cache" / "softmax" / "cpu" / "records")
    regen(root, "verify", "rmsnorm", "-t", "cpu", "--seeds", "1", env=env, check=True)
    proc = regen(root, "export", "rmsnorm", "softmax", "-t", "cpu", "-o", str(base / "pkg"), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # blockers first on the path: importing any of these from the package fails loudly
    for module in ("regen", "yaml", "pydantic"):
        (base / "blocker" / module).mkdir(parents=True)
        (base / "blocker" / module / "__init__.py").write_text(
            f"raise ImportError('{module} is not importable here')\n")
    return base, proc.stdout


def _python(code: str, *path: Path):
    # cwd: `python -c` puts it first on sys.path, and the repository's own regen/ must not be there
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=path[-1], env={"PYTHONPATH": ":".join(map(str, path)),
                                            "PATH": "/usr/bin:/bin"})


def test_export_writes_only_verified_columns_and_says_why_the_others_are_left_out(exported):
    base, out = exported
    assert "exported 1 kernel column (rmsnorm@cpu)" in out
    assert "skipped softmax@cpu: verify — never verified on " in out
    manifest = json.loads((base / "pkg" / "regen_kernels" / "manifest.json").read_text())
    (col,) = manifest["columns"]
    assert col["column"] == "rmsnorm@cpu" and col["record"]["verified_at"]
    assert (base / "pkg" / "regen_kernels" / col["binary"]).is_file()


def test_pip_installed_export_runs_the_cpu_op_without_regen(exported):
    base, _ = exported
    target = base / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                          "--no-build-isolation", "--target", str(target), str(base / "pkg")],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    proc = _python(RUN_CPU_OP, base / "blocker", target)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "rmsnorm@cpu True ['rmsnorm@cpu']"
    assert lines[1] == "no regen: regen is not importable here"


def test_import_refuses_a_binary_that_is_not_the_verified_one(exported, tmp_path):
    base, _ = exported
    pkg = tmp_path / "pkg"
    shutil.copytree(base / "pkg", pkg)
    (binary,) = (pkg / "regen_kernels" / "binaries").iterdir()
    data = bytearray(binary.read_bytes())
    data[-1] ^= 0xFF
    binary.write_bytes(bytes(data))
    proc = _python("import regen_kernels", base / "blocker", pkg)
    assert proc.returncode == 1
    assert (f"ImportError: regen_kernels: binaries/{binary.name} has digest" in proc.stderr
            and "but the verification record of rmsnorm@cpu verified" in proc.stderr
            and "refusing to load a binary that is not the verified one" in proc.stderr), proc.stderr


def test_export_with_nothing_verified_exits_1_and_writes_nothing(tmp_path):
    root = tmp_path / "proj"
    for name in ("specs", "oracles", "targets", "cache"):
        shutil.copytree(REPO / name, root / name)
    shutil.rmtree(root / "cache" / "softmax" / "cpu" / "records")
    proc = regen(root, "export", "softmax", "-t", "cpu", "-o", str(tmp_path / "out"))
    assert proc.returncode == 1
    assert "skipped softmax@cpu: verify — never verified on " in proc.stdout
    assert not (tmp_path / "out").exists()
