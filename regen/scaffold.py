"""`regen new KERNEL`: a spec and an oracle that validate, to be edited."""

from __future__ import annotations

from pathlib import Path

from .errors import InputError

SPEC = """name: {name}
summary: One line saying what {name} computes.
intent: |
  Describe the computation as you would to a kernel engineer: the math, the numerics that matter
  (accumulation precision, special values), the shapes that matter and what makes it fast.
signature:
  dtypes: [float32]
  inputs:
    - {{name: x, dtype: T, shape: [M, N]}}
  outputs:
    - {{name: y, dtype: T, shape: [M, N]}}
invariants: []
cases:
  - {{M: 1, N: 1}}
  - {{M: 7, N: 1000}}
  - {{M: 4096, N: 4096, bench: true}}
tolerance:
  float32: {{atol: 1.0e-6, rtol: 1.0e-5}}
profile:
  floor_fraction: {{nvidia: 0.8}}
"""

ORACLE = '''"""Oracle for specs/{name}.yaml."""

import torch


def make_inputs(case, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    return {{"x": torch.randn(m, n, generator=g).to(case.dtype).to(case.device)}}


def reference(inputs, case):
    return {{"y": inputs["x"].to(torch.float64)}}


def check(inputs, outputs, case):
    return []
'''

CPU_TARGET = """description: Host CPU, C++17 with OpenMP, called through a C ABI.
vendor: host
arch: x86_64
language: cpp
toolchain:
  name: cxx
  flags: ["-O3", "-std=c++17", "-fopenmp", "-fPIC", "-shared"]
"""


def new_kernel(root: Path, name: str) -> list[Path]:
    import re

    if not re.match(r"^[a-z][a-z0-9_]*$", name):
        raise InputError(f"kernel names are lower_snake_case, got {name!r}", field="KERNEL")
    spec, oracle = root / "specs" / f"{name}.yaml", root / "oracles" / f"{name}.py"
    for p in (spec, oracle):
        if p.exists():
            raise InputError("already exists; edit it instead", file=str(p))
    written = []
    for p, text in ((spec, SPEC.format(name=name)), (oracle, ORACLE.format(name=name))):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        written.append(p)
    cpu = root / "targets" / "cpu.yaml"
    if not (root / "targets").exists() or not any((root / "targets").glob("*.yaml")):
        cpu.parent.mkdir(parents=True, exist_ok=True)
        cpu.write_text(CPU_TARGET)
        written.append(cpu)
    from .store import Store

    Store(root / "cache").ensure_marked()
    return written
