"""Shared fixtures: small real projects in temporary folders (real specs, oracles, compilers)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# tests/support (helpers shared by test files) imports as `support` in any pytest import mode
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

SCALE_SPEC = """\
name: scale
summary: Multiply every element by a scalar.
intent: |
  y = alpha * x elementwise over a contiguous [M, N] tensor, computed in float32.
signature:
  dtypes: [float32]
  inputs:
    - {name: x, dtype: T, shape: [M, N]}
  outputs:
    - {name: y, dtype: T, shape: [M, N]}
  params:
    - {name: alpha, type: float, default: 2.0}
invariants:
  - name: finite
    description: every output is finite
cases:
  - {M: 1, N: 1}
  - {M: 3, N: 130}
tolerance:
  float32: {atol: 1.0e-6, rtol: 1.0e-6}
"""

SCALE_ORACLE = '''\
"""Oracle for scale."""

import torch


def make_inputs(case, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(case.sizes["M"], case.sizes["N"], generator=g).to(case.dtype).to(case.device)}


def reference(inputs, case):
    return {"y": inputs["x"].double() * case.params["alpha"]}


def check(inputs, outputs, case):
    return [] if torch.isfinite(outputs["y"]).all() else ["finite: non-finite output"]
'''

SCALE_CPP = """\
#include <cstdint>
extern "C" void scale_f32(const float* x, float* y, int64_t M, int64_t N, float alpha) {
  for (int64_t i = 0; i < M * N; ++i) y[i] = alpha * x[i];
}
"""

SCALE_RECIPE = """\
launches:
  - kernel: scale_{dtype}
    args: [x, y, M, N, "float32:alpha"]
"""

CPU_TARGET = (REPO / "targets" / "cpu.yaml").read_text()


def regen(root: Path, *args: str, env: dict | None = None, check: bool = False):
    """Run the real CLI in a child process, as a user would."""
    import os

    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("REGEN_LOCAL_CACHE", str(root / ".local-cache"))
    proc = subprocess.run([sys.executable, "-m", "regen.cli", "--root", str(root), *args],
                          capture_output=True, text=True, env=e, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"regen {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def make_project(root: Path, kernels=("scale",), targets=("cpu",)) -> Path:
    (root / "specs").mkdir(parents=True, exist_ok=True)
    (root / "oracles").mkdir(exist_ok=True)
    (root / "targets").mkdir(exist_ok=True)
    for k in kernels:
        if k == "scale":
            (root / "specs" / "scale.yaml").write_text(SCALE_SPEC)
            (root / "oracles" / "scale.py").write_text(SCALE_ORACLE)
        else:
            shutil.copy(REPO / "specs" / f"{k}.yaml", root / "specs")
            shutil.copy(REPO / "oracles" / f"{k}.py", root / "oracles")
    for t in targets:
        if t == "cpu":
            (root / "targets" / "cpu.yaml").write_text(CPU_TARGET)
        elif t == "cpu2":  # a second host column (e.g. another flag set) on the same hardware
            (root / "targets" / "cpu2.yaml").write_text(CPU_TARGET.replace("-O3", "-O2"))
        else:
            for p in (REPO / "targets").glob("_*.yaml"):
                shutil.copy(p, root / "targets")
            _copy_target(t, root / "targets")
    return root


def _copy_target(name: str, into: Path) -> None:
    """A target file and the files it extends."""
    import yaml

    path = REPO / "targets" / f"{name}.yaml"
    shutil.copy(path, into)
    parent = (yaml.safe_load(path.read_text()) or {}).get("extends")
    if parent:
        _copy_target(parent, into)


def write_handoff(folder: Path, kernel: str, target: str, source: str, recipe: str, root: Path):
    """A handoff folder made by the real `regen handoff`, then filled in."""
    regen(root, "handoff", kernel, "--target", target, "--out", str(folder), check=True)
    stub = next(p for p in folder.glob("kernel.*"))
    stub.write_text(source)
    (folder / "launch.yaml").write_text(recipe)
    return folder


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path / "proj")


def dedent(s: str) -> str:
    return textwrap.dedent(s)


# the kernels the regen.ops and example tests run on the host column, verified for real once
OPS_VERIFIED = ("rmsnorm", "softmax", "swiglu", "rope", "cross_entropy", "cross_entropy_bwd")
OPS_UNVERIFIED = "layernorm"   # its host records removed: never verified here


@pytest.fixture(scope="session")
def verified_cpu_project(tmp_path_factory):
    """A copy of this repository's project whose host column is verified on this machine
    (`regen verify -t cpu`, one seed) for OPS_VERIFIED, and OPS_UNVERIFIED has no host record."""
    root = tmp_path_factory.mktemp("ops") / "proj"
    for name in ("specs", "oracles", "targets", "cache"):
        shutil.copytree(REPO / name, root / name)
    shutil.rmtree(root / "cache" / OPS_UNVERIFIED / "cpu" / "records", ignore_errors=True)
    regen(root, "verify", *OPS_VERIFIED, "-t", "cpu", "--seeds", "1",
          env={"REGEN_LOCAL_CACHE": str(root.parent / "lc")}, check=True)
    return root
