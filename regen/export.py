"""`regen export`: the verified kernels of some columns as a small installable Python package.

The package holds the binaries (one file per distinct binary), the launch recipes, the op
signatures and a loader (regen/ops/_package_init.py) over copies of regen.ops' standalone modules
(signature, launch, dispatch) and of what they use: the expression parser, the dtype table and
the driver helpers regen's own CUDA runtime uses (regen/cudadrv.py). Only what the planner calls
up to date with a passing record is exported, and only when the binary built here is the one the
record verified; anything else is reported with its reason, never exported.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from .errors import InputError

# module in regen -> (its name in the package, the import lines rewritten for the package)
_COPIES = {
    "ops/signature.py": ("_signature.py", {"from ..expr import": "from ._expr import"}),
    "ops/launch.py": ("_launch.py", {"from ..cudadrv import": "from ._cudadrv import",
                                     "from ..dtypes import": "from ._dtypes import",
                                     "from ..expr import": "from ._expr import",
                                     "from ..tensormap import": "from ._tensormap import"}),
    "tensormap.py": ("_tensormap.py", {"from .dtypes import": "from ._dtypes import",
                                       "from .expr import": "from ._expr import"}),
    "cudadrv.py": ("_cudadrv.py", {}),
    "ops/dispatch.py": ("_dispatch.py", {"from .launch import": "from ._launch import",
                                         "from .signature import": "from ._signature import"}),
    "ops/autograd.py": ("_autograd.py", {}),
    "ops/patch.py": ("_patch.py", {}),
    "expr.py": ("_expr.py", {"from .dtypes import": "from ._dtypes import"}),
    "dtypes.py": ("_dtypes.py", {}),
    "ops/_package_init.py": ("__init__.py", {}),
}
def signature_data(spec) -> dict:
    """A spec's signature as the plain data regen/ops/signature.py reads (in regen.ops and in an
    exported package)."""
    sig = spec.signature
    return {"name": spec.name, "dtypes": list(sig.dtypes),
            "inputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in sig.inputs],
            "outputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                         "inplace_of": t.inplace_of} for t in sig.outputs],
            "params": [{"name": p.name, "type": p.type, "default": p.default} for p in sig.params]}


_SUFFIX = {"cuda": ".cubin", "cpp": ".so"}
_DEVICE = {"cuda": "cuda", "cpp": "cpu"}

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "{version}"
description = "Verified kernels exported by regen: {columns}"
requires-python = ">=3.10"
dependencies = ["torch>=2.4"{cuda_dep}]

[tool.setuptools]
packages = ["{package}"]

[tool.setuptools.package-data]
{package} = ["manifest.json", "binaries/*"]
"""


def export(project, store, targets: list[str], out: Path, package: str,
           kernels: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Write the package into `out`; returns (exported columns, skipped lines with reasons)."""
    from . import plan as planning
    from .compile import compile_source, toolchain_problem
    from .keys import digest
    from .recipe import parse_recipe

    if not re.fullmatch(r"[a-z_][a-z0-9_]*", package):
        raise InputError(f"expected a Python package name (lowercase letters, digits, _), got "
                         f"{package!r}", field="--name")
    if out.exists() and any(out.iterdir()) and not (out / "pyproject.toml").exists():
        raise InputError("exists and is not an exported package; choose an empty folder",
                         file=str(out))
    columns, skipped, binaries, ops = [], [], {}, {}
    for spec, target in project.pairs(kernels or project.library_names(), targets):
        node = planning.plan_node(project, store, spec, target)
        if target.language not in _SUFFIX:
            skipped.append(f"{node.label}: no in-process runtime for {target.language} yet")
            continue
        if node.action != planning.UP_TO_DATE or not (node.record and node.record.get("ok")):
            skipped.append(f"{node.label}: {node.action} — {'; '.join(node.reasons)}")
            continue
        problem = toolchain_problem(target)
        if problem:
            skipped.append(f"{node.label}: cannot build the verified binary here: {problem}")
            continue
        compiled = compile_source(node.entry.source(), target)
        want = node.record["compile"]["binary"]
        if not compiled.result.ok or digest(compiled.result.binary) != want:
            got = digest(compiled.result.binary)[:12] if compiled.result.ok else "a compile error"
            skipped.append(f"{node.label}: the binary built here ({got}) is not the verified one "
                           f"({want[:12]})")
            continue
        name = f"binaries/{want[:24]}{_SUFFIX[target.language]}"
        binaries[name] = compiled.result.binary
        rec = node.record
        columns.append({
            "kernel": spec.name, "column": node.label, "target": target.name,
            "device": _DEVICE[target.language], "arch": target.arch,
            "match": list(target.hardware.match), "binary": name,
            "recipe": parse_recipe(node.entry.recipe()).model_dump(mode="json"),
            "record": {"binary": want, "entry": node.entry.id, "verify_key": rec.get("verify_key"),
                       "verified_at": rec.get("verified_at"), "hardware": rec.get("hardware"),
                       "cases": len(rec.get("cases") or [])}})
        ops[spec.name] = spec
    if not columns:
        return [], skipped
    if out.exists():
        shutil.rmtree(out)
    pkg = out / package
    (pkg / "binaries").mkdir(parents=True)
    regen_dir = Path(__file__).resolve().parent
    for source, (name, rewrites) in _COPIES.items():
        text = (regen_dir / source).read_text()
        for old, new in rewrites.items():
            if old not in text:
                raise RuntimeError(f"regen/{source} no longer has {old!r}; update regen/export.py")
            text = text.replace(old, new)
        (pkg / name).write_text(text)
    for name, data in binaries.items():
        (pkg / name).write_bytes(data)
    manifest = {"namespace": package, "ops": [signature_data(s) for s in ops.values()],
                "summaries": {k: s.summary for k, s in ops.items()}, "columns": columns}
    (pkg / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    from . import __version__

    cuda = any(c["device"] == "cuda" for c in columns)
    (out / "pyproject.toml").write_text(PYPROJECT.format(
        dist=package.replace("_", "-"), version=__version__, package=package,
        columns=", ".join(c["column"] for c in columns),
        cuda_dep=', "cuda-bindings>=12.4"' if cuda else ""))
    return [c["column"] for c in columns], skipped
